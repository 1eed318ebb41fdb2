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

import os
import re
from collections.abc import Callable
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


def _star_chunks(segment: str, element: Callable[[str, int], tuple[str, int]]) -> list[str]:
    """What stands between the stars of a segment (a run of stars is one star), for either dialect:
    `element(segment, i)` reads the one thing at i that is not a star, as (its text, the index after it),
    so a star inside `[...]` or escaped is not a star."""
    chunks: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(segment):
        if segment[i] == "*":
            chunks.append("".join(current))
            current = []
            while i < len(segment) and segment[i] == "*":
                i += 1
            continue
        text, i = element(segment, i)
        current.append(text)
    chunks.append("".join(current))
    return chunks


def _glob_element(segment: str, i: int) -> tuple[str, int]:
    """A bracket expression as written, or one character (each chunk is turned into a regex later)."""
    if segment[i] == "[" and (found := _char_class(segment, i)) is not None:
        return segment[i : found[1]], found[1]
    return segment[i], i + 1


def _split_stars(segment: str) -> list[str]:
    """Star-free chunks between the stars of a segment (stars inside `[...]` are not stars)."""
    return _star_chunks(segment, _glob_element)


def _segment_regex(segment: str) -> str:
    return _stars_regex([_chunk_regex(chunk) for chunk in _split_stars(segment)])


def _stars_regex(chunks: list[str]) -> str:
    """One segment from the regexes of its star-free, fixed-width pieces (a star between each two):
    each middle piece is found leftmost and committed, so nothing backtracks into an earlier choice."""
    if len(chunks) == 1:
        return chunks[0]
    first, *middle, last = chunks
    out = [first]
    out += [f"(?>[^/]*?{chunk})" for chunk in middle]
    out.append(f"[^/]*{last}")
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
    return _path_regex([None if s == GLOBSTAR else _segment_regex(s) for s in _segments(pattern)])


def _path_regex(segments: list[str | None], *, trailing_globstar: str = _ANY_SEGMENTS) -> str:
    """Regex for `path + "/"` from segment regexes (None: a `**` segment, any number of folders)."""
    runs: list[tuple[bool, list[str]]] = []  # runs of ordinary segments: (a `**` stands before it, regexes)
    star = False
    for segment in segments:
        if segment is None:
            star = True
            continue
        if star or not runs:
            runs.append((star, []))
            star = False
        runs[-1][1].append(segment + "/")
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
        out.append(trailing_globstar)
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


# --- .gitignore files -------------------------------------------------------------------------
# The journal and Glob walk folders git does not look into (nested repositories) themselves, and the
# agent can write any .gitignore there: its patterns are hostile input too. They are compiled here
# with git's own rules (gitignore(5), wildmatch) onto the same star-free pieces as above, so no
# pattern costs more than (path length x pattern length) per path. Matching is on bytes (each
# character of the latin-1 text is one byte), as git's is: `?` is one byte of a UTF-8 name.

IGNORE_READ_LIMIT = 1 << 20  # bytes of one .gitignore that are read
# Each match is bounded, but a megabyte of patterns times many files still adds up: a walk that
# applies .gitignore files (one snapshot, one Glob listing) stops after this long and names what it left.
IGNORE_WALK_SECONDS = 10.0
_IGNORE_GROUP = 200  # patterns compiled into one regex (alternatives tried in C, newest first)
_ANYTHING = "[^\\x00]*/"  # any text ending at a folder boundary, slashes included (not the folder mark)
_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9", "alpha": "a-zA-Z", "blank": " \\t", "cntrl": "\\x00-\\x1f\\x7f", "digit": "0-9",
    "graph": "!-~", "lower": "a-z", "print": " -~", "punct": "!-/:-@\\[-`{-~", "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z", "xdigit": "0-9A-Fa-f",
}


class _NeverMatches(ValueError):
    """A pattern git would never match (an unclosed `[`, an unknown `[:class:]`, a trailing `\\`)."""


def _ignore_bracket(pattern: str, start: int) -> tuple[str, int]:
    """git's wildmatch bracket at `start`: (regex for one byte that is never `/`, index after `]`)."""
    i = start + 1
    negated = i < len(pattern) and pattern[i] in "!^"
    if negated:
        i += 1
    items: list[str] = []
    previous: str | None = None
    first = True
    while True:
        if i >= len(pattern):
            raise _NeverMatches("unclosed [")
        char = pattern[i]
        if char == "]" and not first:
            break
        first = False
        if char == "\\":
            i += 1
            if i >= len(pattern):
                raise _NeverMatches("trailing backslash")
            char = pattern[i]
            items.append(re.escape(char))
            previous = char
        elif char == "-" and previous is not None and i + 1 < len(pattern) and pattern[i + 1] != "]":
            i += 1
            high = pattern[i]
            if high == "\\":
                i += 1
                if i >= len(pattern):
                    raise _NeverMatches("trailing backslash")
                high = pattern[i]
            if previous <= high:  # (the first character matches on its own either way, as in git)
                items.append(f"{re.escape(previous)}-{re.escape(high)}")
            previous = None
        elif char == "[" and pattern.startswith(":", i + 1):
            end = pattern.find("]", i + 2)
            if end < 0:
                raise _NeverMatches("unclosed [")
            if pattern[end - 1] != ":" or end - 1 < i + 2:
                items.append(re.escape("["))  # not `[:name:]`: a plain `[`
                previous = "["
            else:
                name = pattern[i + 2:end - 1]
                if name not in _POSIX_CLASSES:
                    raise _NeverMatches(f"unknown class [:{name}:]")
                items.append(_POSIX_CLASSES[name])
                previous = None
                i = end
        else:
            items.append(re.escape(char))
            previous = char
        i += 1
    body = "".join(items)
    if negated:
        return f"[^/{body}]", i + 1
    return (f"(?!/)[{body}]" if body else "(?!)"), i + 1


def _ignore_segment(segment: str) -> str:
    """One segment of a gitignore pattern (escapes, `?`, brackets, stars) as a linear-time regex."""
    return _stars_regex(_star_chunks(segment, _ignore_element))


def _ignore_element(segment: str, i: int) -> tuple[str, int]:
    """The regex of the gitignore element at i that is not a star: an escape, `?`, a bracket, a character."""
    char = segment[i]
    if char == "\\":
        if i + 1 >= len(segment):
            raise _NeverMatches("trailing backslash")
        return re.escape(segment[i + 1]), i + 2
    if char == "?":
        return "[^/]", i + 1
    if char == "[":
        return _ignore_bracket(segment, i)
    return re.escape(char), i + 1


def _split_unescaped(pattern: str) -> list[tuple[str, bool]]:
    """Split on `/`, keeping escapes and brackets intact (a `/` inside `[...]` belongs to the bracket,
    which never matches a slash): (segment, whether the slash after it was written `\\/`)."""
    parts: list[tuple[str, bool]] = []
    current: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "[":
            end = _ignore_bracket(pattern, i)[1]
            current.append(pattern[i:end])
            i = end
            continue
        if char == "\\" and i + 1 < len(pattern):
            if pattern[i + 1] == "/":
                parts.append(("".join(current), True))
                current = []
            else:
                current.append(pattern[i:i + 2])
            i += 2
            continue
        if char == "/":
            parts.append(("".join(current), False))
            current = []
        else:
            current.append(char)
        i += 1
    parts.append(("".join(current), False))
    return parts


def _trim_trailing_spaces(line: str) -> str:
    """git's trim_trailing_spaces: trailing spaces go unless the first of them is escaped."""
    last_space: int | None = None
    i = 0
    while i < len(line):
        char = line[i]
        if char == " ":
            if last_space is None:
                last_space = i
        elif char == "\\":
            i += 1
            if i >= len(line):
                return line
            last_space = None
        else:
            last_space = None
        i += 1
    return line if last_space is None else line[:last_space]


def gitignore_pattern(line: str) -> tuple[str, bool, bool] | None:
    """(regex source to match a subject, negated, matched against the name only) for one line of a
    .gitignore (latin-1 text of its bytes); None for a blank line, a comment or a pattern git never
    matches. The subject is `name + "/"` or `path + "/"`, followed by NUL for a folder."""
    line = _trim_trailing_spaces(line.removesuffix("\r"))
    if not line or line.startswith("#"):
        return None
    negated = line.startswith("!")
    if negated:
        line = line[1:]
    dir_only = line.endswith("/")
    if dir_only:
        line = line[:-1]
    if not line:
        return None
    mark = "\0" if dir_only else "\0?"
    basename = "/" not in line
    try:
        if basename:  # no slash: the name at any depth; without WM_PATHNAME `**` is just a star
            return f"{_ignore_segment(line)}/{mark}", negated, True
        return f"{_ignore_path(line.removeprefix('/'))}{mark}", negated, False
    except _NeverMatches:
        return None


def _ignore_path(pattern: str) -> str:
    """A pattern with a slash, matched against the whole path below the .gitignore's folder."""
    # git compares the part before the first wildcard as plain text and wildmatches the rest from
    # its own start: a `**` opening that rest spans folders even right after a name (`foo**/bar`
    # ignores `foobar` and `foo/x/bar`).
    first = next((i for i, c in enumerate(pattern) if c in "*?[\\"), len(pattern))
    stars = len(pattern[first:]) - len(pattern[first:].lstrip("*"))
    after = pattern[first + stars:]
    if 0 < first and pattern[first - 1] != "/" and stars >= 2 and (not after or after.startswith(("/", "\\/"))):
        prefix = re.escape(pattern[:first])
        if not after:
            return prefix + _ANYTHING
        if after.startswith("\\"):  # `\\/`: no "no folder at all" case, as above
            return f"{prefix}{_ANYTHING}{_ignore_segments(after[2:])}"
        return f"{prefix}(?:{_ANYTHING})?{_ignore_segments(after[1:])}"
    return _ignore_segments(pattern)


def _ignore_segments(pattern: str) -> str:
    regexes: list[str | None] = []
    for segment, escaped_slash in _split_unescaped(pattern):
        if len(segment) > 1 and segment.strip("*") == "":
            regexes.append(None)
            if escaped_slash:  # `**\\/`: git skips its "no folder at all" case (it looks for a plain `/`)
                regexes.append("[^/]*")
        else:
            regexes.append(_ignore_segment(segment))
    # A trailing `/**` is everything inside, not the folder itself: at least one more segment.
    return _path_regex(regexes, trailing_globstar="(?:[^/]*/)+")


class _PatternGroup:
    """Up to _IGNORE_GROUP patterns of one kind in one regex, newest first: the match says which."""

    def __init__(self, items: list[tuple[int, str, bool]]) -> None:
        self.items = items  # (line number, regex, negated), newest first
        try:
            self.regex: re.Pattern[str] | None = re.compile(
                "(?:" + "|".join(f"({source})" for _n, source, _neg in items) + r")\Z", re.DOTALL)
        except (re.error, RecursionError, OverflowError):
            self.regex = None  # compiled one by one instead (never expected: everything is escaped)
            self.single = [(n, re.compile(f"(?:{s})\\Z", re.DOTALL), neg) for n, s, neg in items if _compiles(s)]

    def newest(self, subject: str) -> tuple[int, bool] | None:
        if self.regex is not None:
            match = self.regex.match(subject)
            if match is None or match.lastindex is None:
                return None
            number, _source, negated = self.items[match.lastindex - 1]
            return number, negated
        for number, regex, negated in self.single:
            if regex.match(subject):
                return number, negated
        return None


def _compiles(source: str) -> bool:
    try:
        re.compile(source)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


class IgnoreRules:
    """One .gitignore file, matched as git matches it: the last pattern that matches decides."""

    def __init__(self, data: bytes) -> None:
        text = data[:IGNORE_READ_LIMIT].removeprefix(b"\xef\xbb\xbf").decode("latin-1")
        names: list[tuple[int, str, bool]] = []
        paths: list[tuple[int, str, bool]] = []
        for number, line in enumerate(text.split("\n")):
            parsed = gitignore_pattern(line)
            if parsed is not None:
                source, negated, basename = parsed
                (names if basename else paths).append((number, source, negated))
        self.names = _groups(names)
        self.paths = _groups(paths)

    def decide(self, rel: str, is_dir: bool) -> bool | None:
        """True: ignored; False: re-included by a `!` pattern; None: no pattern here matches.
        `rel`: the path below this file's folder, `/`-separated."""
        if not self.names and not self.paths:
            return None
        subject = os.fsencode(rel).decode("latin-1") + "/" + ("\0" if is_dir else "")
        best = _newest(self.paths, subject)
        named = _newest(self.names, subject[subject.rfind("/", 0, len(subject) - (2 if is_dir else 1)) + 1:])
        if named is not None and (best is None or named[0] > best[0]):
            best = named
        return None if best is None else not best[1]


def _groups(items: list[tuple[int, str, bool]]) -> list[_PatternGroup]:
    items = items[::-1]
    return [_PatternGroup(items[i:i + _IGNORE_GROUP]) for i in range(0, len(items), _IGNORE_GROUP)]


def _newest(groups: list[_PatternGroup], subject: str) -> tuple[int, bool] | None:
    for group in groups:
        found = group.newest(subject)
        if found is not None:
            return found
    return None


@lru_cache(maxsize=128)
def ignore_rules(data: bytes) -> IgnoreRules:
    """The compiled rules of a .gitignore's bytes (a walk meets the same file at every snapshot)."""
    return IgnoreRules(data)


def ignored_by(files: list[tuple[str, IgnoreRules]], path: str, is_dir: bool) -> bool:
    """Whether the .gitignore files above `path` ignore it, in git's order: the deepest file first, in
    each the last pattern that matches. `files`: (its folder's prefix: "" or "dir/", its rules), each
    a folder `path` is in, outermost first."""
    for base, rules in reversed(files):
        decided = rules.decide(path[len(base):], is_dir)
        if decided is not None:
            return decided
    return False
