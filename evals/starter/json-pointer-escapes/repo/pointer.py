def resolve(document, pointer: str):
    """The value `pointer` (RFC 6901, e.g. "/a/0/b") refers to inside `document`."""
    if pointer == "":
        return document
    if not pointer.startswith("/"):
        raise ValueError("a JSON pointer starts with /")
    value = document
    for token in pointer[1:].split("/"):
        if isinstance(value, list):
            value = value[int(token)]
        else:
            value = value[token]
    return value
