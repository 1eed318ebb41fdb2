def chunked(items, size: int):
    """Yield lists of `size` consecutive items."""
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
