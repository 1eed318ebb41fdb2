"""Model-chosen text made safe to show on a terminal: control, invisible and look-alike characters
(letters, and the punctuation of paths: `.`, `/`, `\\`, `:`) appear escaped.

Anything the agent touched (its words, commands, paths, file contents, tool output) may carry
terminal escapes: `\\r\\x1b[2K\\x1b[1A` can redraw an approval prompt so that the user approves a
command they never saw. Neither Rich nor Textual removes ESC, C1 controls or bidi overrides, so
every place that prints such text runs it through `visible()` first. The same goes for characters
that draw nothing or draw like another one: `'admin\\u200b'` and `'admin'` look the same in a diff
to approve, and so do `'admin'` and `'\\u0430dmin'` (a Cyrillic а).
"""

from __future__ import annotations

import re
import unicodedata

_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t", "\b": "\\b", "\f": "\\f", "\v": "\\v", "\a": "\\a", "\x00": "\\0"}

# C0 controls (newline and tab are handled apart), DEL and C1 controls (U+009B is an 8-bit CSI);
# bidi embeddings, overrides and isolates (they reorder what is shown: "Trojan Source"); line and
# paragraph separators; lone surrogates (not Unicode at all: a UTF-8 terminal cannot even get them).
_UNSAFE = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff"
# Characters that draw nothing, or a blank like a space: soft hyphen, combining grapheme joiner,
# Arabic/Syriac format marks, Hangul fillers, Khmer inherent vowels, Mongolian selectors, zero-width
# space/joiners, spaces other than U+0020, word joiner and invisible operators, deprecated format
# controls, Braille blank, variation selectors, BOM, interlinear annotation, shorthand and musical
# format controls, tag characters.
_INVISIBLE = (
    "\u00a0\u00ad\u034f\u0600-\u0605\u06dd\u070f\u08e2\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f"
    "\u2000-\u200d\u202f\u205f-\u2065\u206a-\u206f\u2800\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e007f\U000e0100-\U000e01ef"
)
_ALWAYS = re.compile(f"[{_UNSAFE}{_INVISIBLE}]")
_ONE_LINE = re.compile(f"[{_UNSAFE}{_INVISIBLE}\n\t]")
# In an emoji sequence the joiner and the emoji presentation selector draw the emoji (👨‍💻, ⚠️): kept
# there, escaped anywhere else.
_EMOJI_GLUE = frozenset("\u200d\ufe0e\ufe0f")
_WORD = re.compile(r"\w+")
# Letters that draw like Latin ones: Greek, Cyrillic, fullwidth and mathematical alphanumerics. A word
# that mixes them with Latin letters gets them escaped (a word all in one script is left alone).
_LOOK_ALIKE = re.compile("[\u0370-\u03ff\u1f00-\u1fff\u0400-\u052f\u1c80-\u1c8f\u2de0-\u2dff\ua640-\ua69f\uff10-\uff5a"
                         "\U0001d400-\U0001d7ff]")
_LATIN = re.compile("[A-Za-z\u00c0-\u024f\u1e00-\u1eff]")
# Punctuation that draws like `.`, `/`, `\\` or `:` (Unicode's confusables of the characters a path or
# command is made of): `calc.py\u2024py` reads as `calc.py.py`, `src\u2215x` as `src/x`. Escaped
# wherever it touches a letter, digit or ASCII punctuation (a path, a name, code), so prose in a script
# that uses its own (the fullwidth colon in Chinese text) is left alone.
_PUNCTUATION_ALIKE = (
    # like "." (and the middle dots and small full stops, which read as one between two names)
    "\u0660\u06f0\u0701\u0702\u2024\ua4f8\ua60e\ufe52\uff0e\U00010a50\U0001d16d"
    "\u00b7\u0387\u1427\u16eb\u2027\u2e31\u2e33\u30fb\uff61\uff65"
    # like "/"
    "\u1735\u2041\u2044\u2215\u2571\u27cb\u29f8\u2cc6\u2f03\u3033\u30ce\u31d3\u4e3f\uff0f\U0001d23a"
    # like "\\"
    "\u2216\u2572\u27cd\u29f5\u29f9\u2f02\u31d4\u4e36\ufe68\uff3c\U0001d20f\U0001d23b"
    # like ":"
    "\u02d0\u02f8\u0589\u05c3\u0703\u0704\u0903\u0a83\u16ec\u1803\u1809\u205a\u2236\ua4fd\ua789"
    "\ufe13\ufe30\ufe55\uff1a\U0001d10b"
)
# A look-alike with an ASCII letter, digit or punctuation (or a Latin letter) right before or after it.
_NAME_CHAR = "[\\x21-\\x7e\\u00c0-\\u024f]"
_PUNCT_IN_NAME = re.compile(f"(?<={_NAME_CHAR})[{_PUNCTUATION_ALIKE}]|[{_PUNCTUATION_ALIKE}](?={_NAME_CHAR})")


# A base character of a name (ASCII or Latin) with the combining marks after it. The marks are escaped
# unless the whole draws as one accented letter Unicode has (NFC composes it: `cafe\u0301`, a decomposed
# Vietnamese `e\u0323\u0302`): `calc\u0323py` draws a dot under the c, `src\u0338x` a slash through it.
_MARKED = re.compile(f"({_NAME_CHAR})([\u0300-\u036f\u0483-\u0489\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+)")
# Cyrillic and Greek letters that draw like a Latin one. A word made only of them, in a run of text that
# has Latin letters too (`\u0430\u0440\u0440\u04cf\u0435.com`, `\u0430\u0440\u0435.py`), reads as
# Latin: escaped. A word with any other letter of its script (`\u0444\u0430\u0439\u043b.txt`) is left alone.
_LATIN_LOOKING = frozenset(
    "\u0430\u0435\u043e\u0440\u0441\u0443\u0445\u0455\u0456\u0458\u04cf\u0501\u051b\u051d\u04bb\u04af"
    "\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0425\u0423\u0406\u0408\u0405\u051a\u051c"
    "\u03bf\u03bd\u0391\u0392\u0395\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7"
)
_RUN = re.compile(r"\S+")


def _stray_marks(match: re.Match[str]) -> str:
    base, marks = match.group(1), match.group(2)
    if len(unicodedata.normalize("NFC", base + marks)) == 1:
        return match.group()
    return base + "".join(_escape_char(m) for m in marks)


def _latin_looking(match: re.Match[str]) -> str:
    run = match.group()
    if not _LATIN.search(run):
        return run

    def word(found: re.Match[str]) -> str:
        text = found.group()
        if text.isascii() or not all(c in _LATIN_LOOKING for c in text):
            return text
        return "".join(_escape_char(c) for c in text)

    return _WORD.sub(word, run)


def _escape_char(char: str) -> str:
    named = _NAMED.get(char)
    if named:
        return named
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _is_emoji(char: str) -> bool:
    return ord(char) >= 0x2000 and unicodedata.category(char) in ("So", "Sk")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _EMOJI_GLUE:
        text, at = match.string, match.start()
        before = text[at - 1] if at else ""
        if before in _EMOJI_GLUE and at > 1:
            before = text[at - 2]  # 🏳️‍🌈: the joiner follows the selector
        after = text[at + 1] if at + 1 < len(text) else ""
        if before and _is_emoji(before) and (char != "\u200d" or (after and _is_emoji(after))):
            return char
    return _escape_char(char)


def _look_alikes(text: str) -> str:
    """Escape the Greek, Cyrillic, fullwidth and mathematical letters of words that mix them with Latin."""

    def word(match: re.Match[str]) -> str:
        found = match.group()
        if found.isascii() or not _LOOK_ALIKE.search(found) or not _LATIN.search(found):
            return found
        return _LOOK_ALIKE.sub(lambda m: _escape_char(m.group()), found)

    return _WORD.sub(word, text)


def visible_line(value: object, limit: int = 70) -> str:
    """A value as one escaped line of at most `limit` characters (a cut one ends in "…")."""
    text = value if isinstance(value, str) else repr(value)
    text = visible(text[: limit * 8].replace("\n", "⏎"), one_line=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def visible(text: str, *, one_line: bool = False, prose: bool = False) -> str:
    """`text` with every character that could move the cursor, restyle or reorder the screen, or that
    draws nothing or like another one, escaped as `\\xNN` / `\\uNNNN` (for the eye: a backslash
    already in the text is not marked).

    Newlines and tabs are kept unless `one_line`, where they are escaped too (`\\n`, `\\t`).
    `prose`: the model's own words as they stream (not what runs or gets written): words mixing
    scripts are left alone there ("10μs"), and a chunk may hold half a word anyway.
    """
    shown = (_ONE_LINE if one_line else _ALWAYS).sub(_escape, text)
    if prose or shown.isascii():
        return shown
    shown = _MARKED.sub(_stray_marks, _PUNCT_IN_NAME.sub(lambda m: _escape_char(m.group()), shown))
    return _RUN.sub(_latin_looking, _look_alikes(shown))
