import re

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def headings(markdown: str) -> list[tuple[int, str]]:
    """(level, title) for each ATX heading, in order."""
    found = []
    for line in markdown.splitlines():
        match = _HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2)))
    return found
