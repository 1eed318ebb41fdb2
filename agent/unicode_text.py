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


def lone_surrogate(text: str) -> int | None:
    """Index of the first lone surrogate in `text`, or None."""
    match = _SURROGATE.search(text)
    return match.start() if match else None


def valid_unicode(text: str) -> str:
    """`text` with escaped bytes decoded as UTF-8 where they form it, and U+FFFD for the rest."""
    if _SURROGATE.search(text) is None:
        return text
    text = _NOT_A_BYTE.sub("\ufffd", text)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
