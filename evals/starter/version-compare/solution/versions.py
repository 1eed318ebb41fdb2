def _parts(version: str) -> list[int]:
    return [int(p) for p in version.split(".")]


def is_newer(a: str, b: str) -> bool:
    """True when version a is newer than version b (dotted numbers like 1.4.2)."""
    pa, pb = _parts(a), _parts(b)
    size = max(len(pa), len(pb))
    pa += [0] * (size - len(pa))
    pb += [0] * (size - len(pb))
    return pa > pb


def latest(versions: list[str]) -> str:
    best = versions[0]
    for v in versions[1:]:
        if is_newer(v, best):
            best = v
    return best
