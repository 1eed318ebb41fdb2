"""Model-chosen text made safe to show on a terminal: control characters appear escaped.

Anything the agent touched (its words, commands, paths, file contents, tool output) may carry
terminal escapes: `\\r\\x1b[2K\\x1b[1A` can redraw an approval prompt so that the user approves a
command they never saw. Neither Rich nor Textual removes ESC, C1 controls or bidi overrides, so
every place that prints such text runs it through `visible()` first.
"""

from __future__ import annotations

import re

_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t", "\b": "\\b", "\f": "\\f", "\v": "\\v", "\a": "\\a", "\x00": "\\0"}

# C0 controls (newline and tab are handled apart), DEL and C1 controls (U+009B is an 8-bit CSI);
# bidi embeddings, overrides and isolates (they reorder what is shown: "Trojan Source"); line and
# paragraph separators; lone surrogates (not Unicode at all: a UTF-8 terminal cannot even get them).
_UNSAFE = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff"
_ALWAYS = re.compile(f"[{_UNSAFE}]")
_ONE_LINE = re.compile(f"[{_UNSAFE}\n\t]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str, *, one_line: bool = False) -> str:
    """`text` with every character that could move the cursor, restyle or reorder the screen escaped.

    Newlines and tabs are kept unless `one_line`, where they are escaped too (`\\n`, `\\t`).
    """
    return (_ONE_LINE if one_line else _ALWAYS).sub(_escape, text)
