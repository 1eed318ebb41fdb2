"""Glob patterns -> one regular expression whose matching time is linear-ish in the path.

The pattern comes from the model, so it is hostile input. Two things made the old translation
blow up: brace expansion is exponential (`{a,b}` 26 times is 67 million patterns), and Python's
backtracking `re` is exponential on several stars in a row (`*a*a*a*a*b` against `aaaa...`).
So braces are counted before they are expanded (and refused past MAX_ALTERNATIVES), and each
star is compiled so that it never backtracks into a choice already made:

- within a path segment, `P0*P1*...*Pk` (each Pi star-free, so of fixed width) becomes
  `P0(?>[^/]*?P1)...[^/]*Pk`: the leftmost Pi is always a right choice, because what follows
  it starts with a star that can absorb anything a later Pi would have skipped;
- across segments, a run of segments after `**` is found the same way, leftmost and atomic.

Paths are matched with a trailing `/` added, so every segment of the pattern is `SEGMENT/`.
Semantics: `*` and `?` stay inside a segment, `**` as a whole segment spans any number of folders
(`**X` and `X**` at a segment's edge too: `**.py` is `**/*.py`), `[abc]`, `[a-z]`, `[!a]` / `[^a]`,
`{a,b}` (nested too). Errors are one line, for the model (`GlobPatternError`).
"""

from __future__ import annotations

import re
from functools import lru_cache

MAX_PATTERN_CHARS = 1000
MAX_ALTERNATIVES = 64
MAX_BRACE_DEPTH = 8

GLOBSTAR = "**"
_ANY_SEGMENTS = "(?:[^/]*/)*"


class GlobPatternError(ValueError):
    """Why a pattern cannot be used, in one line for the model."""


# --- braces -----------------------------------------------------------------------------------


def _brace_pairs(pattern: str) -> dict[int, int]:
    """Index of each `{` that has a matching `}` -> the index of that `}`."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for i, char in enumerate(pattern):
        if char == "{":
            stack.append(i)
            if len(stack) > MAX_BRACE_DEPTH:
                raise GlobPatternError(f"braces nest more than {MAX_BRACE_DEPTH} deep")
        elif char == "}" and stack:
            pairs[stack.pop()] = i
    return pairs


# A parsed pattern: a sequence of items, each a literal string or a list of alternative sequences.
Sequence = list["str | list[Sequence]"]


def _parse(pattern: str, start: int, end: int, pairs: dict[int, int]) -> Sequence:
    items: Sequence = []
    literal: list[str] = []
    i = start
    while i < end:
        close = pairs.get(i)
        if close is None:
            literal.append(pattern[i])
            i += 1
            continue
        if literal:
            items.append("".join(literal))
            literal = []
        options: list[Sequence] = []
        option_start = j = i + 1
        while j < close:  # split on the commas of this pair, stepping over nested pairs
            if j in pairs:
                j = pairs[j] + 1
                continue
            if pattern[j] == ",":
                options.append(_parse(pattern, option_start, j, pairs))
                option_start = j + 1
            j += 1
        options.append(_parse(pattern, option_start, close, pairs))
        items.append(options)
        i = close + 1
    if literal:
        items.append("".join(literal))
    return items


def _count(sequence: Sequence) -> int:
    total = 1
    for item in sequence:
        if isinstance(item, list):
            total *= sum(_count(option) for option in item)
            if total > MAX_ALTERNATIVES:
                return total  # large enough to refuse; no need to know how large
    return total


def _expand(sequence: Sequence) -> list[str]:
    results = [""]
    for item in sequence:
        if isinstance(item, str):
            results = [r + item for r in results]
        else:
            tails = [t for option in item for t in _expand(option)]
            results = [r + t for r in results for t in tails]
    return results


def expand_braces(pattern: str) -> list[str]:
    """'a/*.{py,pyi}' -> ['a/*.py', 'a/*.pyi'] (nested braces too); refused past MAX_ALTERNATIVES."""
    pairs = _brace_pairs(pattern)
    if not pairs:
        return [pattern]
    parsed = _parse(pattern, 0, len(pattern), pairs)
    count = _count(parsed)
    if count > MAX_ALTERNATIVES:
        raise GlobPatternError(
            f"the braces expand to more than {MAX_ALTERNATIVES} patterns; use fewer {{a,b}} groups"
        )
    return _expand(parsed)


# --- one brace-free pattern -> regex ----------------------------------------------------------


def _char_class(segment: str, start: int) -> tuple[str, int] | None:
    """The regex for the `[...]` at `start` and the index after it, or None if it is not closed."""
    i = start + 1
    negate = i < len(segment) and segment[i] in "!^"
    if negate:
        i += 1
    items: list[str] = []
    first = True
    while i < len(segment):
        char = segment[i]
        if char == "]" and not first:
            body = "".join(items)
            return (f"[^/{body}]" if negate else f"[{body}]"), i + 1
        first = False
        if i + 2 < len(segment) and segment[i + 1] == "-" and segment[i + 2] != "]":
            low, high = char, segment[i + 2]
            if low > high:
                raise GlobPatternError(f"bad character range {low}-{high} in [...]: the first must not come after the second")
            items.append(f"{re.escape(low)}-{re.escape(high)}")
            i += 3
            continue
        items.append(re.escape(char))
        i += 1
    return None


def _chunk_regex(chunk: str) -> str:
    """A star-free piece of a segment: literals, `?`, `[...]`."""
    out: list[str] = []
    i = 0
    while i < len(chunk):
        char = chunk[i]
        if char == "?":
            out.append("[^/]")
            i += 1
        elif char == "[" and (found := _char_class(chunk, i)) is not None:
            out.append(found[0])
            i = found[1]
        else:
            out.append(re.escape(char))
            i += 1
    return "".join(out)


def _split_stars(segment: str) -> list[str]:
    """Star-free chunks between the stars of a segment (stars inside `[...]` are not stars)."""
    chunks: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "[" and (found := _char_class(segment, i)) is not None:
            current.append(segment[i : found[1]])
            i = found[1]
            continue
        if char == "*":
            chunks.append("".join(current))
            current = []
            while i < len(segment) and segment[i] == "*":
                i += 1
            continue
        current.append(char)
        i += 1
    chunks.append("".join(current))
    return chunks


def _segment_regex(segment: str) -> str:
    chunks = _split_stars(segment)
    if len(chunks) == 1:
        return _chunk_regex(chunks[0])
    first, *middle, last = chunks
    out = [_chunk_regex(first)]
    out += [f"(?>[^/]*?{_chunk_regex(chunk)})" for chunk in middle]
    out.append(f"[^/]*{_chunk_regex(last)}")
    return "".join(out)


def _segments(pattern: str) -> list[str]:
    """Path segments of a pattern; `**X` / `X**` at a segment's edge split off a `**` segment."""
    out: list[str] = []
    for segment in pattern.split("/"):
        if segment in ("", "."):
            continue
        if segment != GLOBSTAR and segment.startswith(GLOBSTAR):
            out += [GLOBSTAR, "*" + segment.lstrip("*")]
        elif segment != GLOBSTAR and segment.endswith(GLOBSTAR):
            out += [segment.rstrip("*") + "*", GLOBSTAR]
        else:
            out.append(segment)
    collapsed: list[str] = []
    for segment in out:
        if not (segment == GLOBSTAR and collapsed and collapsed[-1] == GLOBSTAR):
            collapsed.append(segment)
    return collapsed


def _pattern_regex(pattern: str) -> str:
    """Regex (unanchored at the end) for one brace-free pattern, to match `path + "/"`."""
    runs: list[tuple[bool, list[str]]] = []  # runs of ordinary segments: (a `**` stands before it, regexes)
    star = False
    for segment in _segments(pattern):
        if segment == GLOBSTAR:
            star = True
            continue
        if star or not runs:
            runs.append((star, []))
            star = False
        runs[-1][1].append(_segment_regex(segment) + "/")
    out: list[str] = []
    for index, (starred, run) in enumerate(runs):
        body = "".join(run)
        if not starred:
            out.append(body)
        elif index == len(runs) - 1 and not star:
            out.append(_ANY_SEGMENTS + body)  # anchored by the end of the path
        else:
            out.append(f"(?>(?:[^/]*/)*?{body})")  # the leftmost place this run fits, committed
    if star:
        out.append(_ANY_SEGMENTS)
    return "".join(out)


@lru_cache(maxsize=256)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """The regex that matches `relative_path + "/"` exactly when the glob matches the path."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise GlobPatternError(f"the pattern is {len(pattern)} characters long; at most {MAX_PATTERN_CHARS}")
    alternatives = [_pattern_regex(p) for p in expand_braces(pattern)]
    source = "(?:" + "|".join(f"(?:{a})" for a in alternatives) + r")\Z"
    try:
        return re.compile(source)
    except (re.error, RecursionError, OverflowError) as exc:
        raise GlobPatternError(f"the pattern cannot be used: {exc}") from None


def glob_matches(regex: re.Pattern[str], relative_path: str) -> bool:
    return regex.match(relative_path + "/") is not None
