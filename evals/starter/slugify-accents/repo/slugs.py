import re


def slugify(text: str) -> str:
    """Lowercase words joined by single hyphens, ASCII only."""
    text = text.encode("ascii", "ignore").decode("ascii")
    words = re.findall(r"[a-z0-9]+", text.lower())
    return "-".join(words)
