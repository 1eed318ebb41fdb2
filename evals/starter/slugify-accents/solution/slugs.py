import re
import unicodedata


def slugify(text: str) -> str:
    """Lowercase words joined by single hyphens, ASCII only."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    words = re.findall(r"[a-z0-9]+", text.lower())
    return "-".join(words)
