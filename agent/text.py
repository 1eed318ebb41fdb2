"""Text that is valid Unicode, whatever it came from.

Lone surrogates reach ribbit from three places: file names and git output decoded with
`surrogateescape` (bytes that are not UTF-8), recorded or served model output (`"\\ud800"` is valid
JSON), and a command line. None of them can be encoded as UTF-8: written to a file, a terminal, a
tokenizer or a transcript they raise UnicodeEncodeError. What the conversation keeps is cleaned here.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")
# Python's surrogateescape maps a byte 0x80-0xFF that is not UTF-8 to U+DC80-U+DCFF.
_NOT_A_BYTE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def _encodable(text: str) -> bool:
    # isascii() reads a flag of the string (O(1)); encoding is C speed. Both are far cheaper than
    # searching for the surrogate range with a regex (20 ns a character).
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def lone_surrogate(text: str) -> int | None:
    """Index of the first lone surrogate in `text`, or None."""
    if _encodable(text):
        return None
    match = _SURROGATE.search(text)
    return match.start() if match else None


def valid_unicode(text: str) -> str:
    """`text` with escaped bytes decoded as UTF-8 where they form it, and U+FFFD for the rest."""
    if _encodable(text):
        return text
    text = _NOT_A_BYTE.sub("\ufffd", text)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
