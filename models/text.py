"""One printable line: the one helper every layer above uses for a message, a path or a server's words
on one line of a terminal or a log (the TUI escapes again for the screen: app/visible.py)."""

from __future__ import annotations


def one_line(text: str | bytes, limit: int = 300, *, fold: bool = True, tail: int = 0) -> str:
    """`text` on one line: runs of whitespace folded to one space (`fold`; else a newline is escaped like
    any character that does not print: controls, undecodable bytes, as Python writes them), at most
    `limit` characters: a longer one is cut with "…", keeping its last `tail` characters."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if fold:
        text = " ".join(text.split())
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(text) <= limit:
        return text
    head = max(0, limit - tail - 1)
    return text[:head] + "…" + (text[-tail:] if tail else "")
