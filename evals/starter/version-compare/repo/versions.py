def is_newer(a: str, b: str) -> bool:
    """True when version a is newer than version b (dotted numbers like 1.4.2)."""
    return a > b


def latest(versions: list[str]) -> str:
    best = versions[0]
    for v in versions[1:]:
        if is_newer(v, best):
            best = v
    return best
