"""Unified diffs split into hunks, so a reviewer can apply some hunks of a change and not others.

The lines are matched by difflib's SequenceMatcher, whose cost grows with how often lines repeat:
for each line of the old text it visits every equal line of the new one. A 40,000-line file of
a few repeated lines took minutes. So its work is estimated first (`_difflib_work`, linear):
within DIFFLIB_BUDGET the whole diff is difflib's, exactly as before; past it, the common head and
tail are matched directly and difflib only sees what lies between; and where even that is too much,
lines that occur once on each side anchor the match (patience diff) and the rest of a gap with no
such line becomes one replacement. The result is always a correct diff; only its grain can change.
"""

from __future__ import annotations

import bisect
import difflib
from collections import Counter
from itertools import repeat

from pydantic import BaseModel

# Inner-loop steps of SequenceMatcher for one diff (about 0.3 s on a 2-core laptop).
DIFFLIB_BUDGET = 1_000_000


class Hunk(BaseModel):
    """A contiguous change: replace old[old_start:old_start+len(old)] (0-based) with `new`."""

    old_start: int
    old: list[str]
    new: list[str]
    header: str
    lines: list[str]  # unified-diff body lines with ' ', '-', '+' prefixes

    @property
    def added(self) -> int:
        return sum(1 for line in self.lines if line.startswith("+"))

    @property
    def removed(self) -> int:
        return sum(1 for line in self.lines if line.startswith("-"))


def split_lines(text: str) -> list[str]:
    """Lines with their ends, split at "\n" only, as git does (str.splitlines also splits at form
    feeds, \x1c-\x1e and U+2028, which would shift every line number after one)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


Block = tuple[int, int, int]  # a[i:i+n] == b[j:j+n]


def _difflib_work(a: list[str], alo: int, ahi: int, b: list[str], blo: int, bhi: int) -> int:
    """Steps SequenceMatcher's first pass takes: for each line of a, the equal lines of b."""
    counts = Counter(b[blo:bhi])
    return sum(map(counts.get, a[alo:ahi], repeat(0)))


def _unique_anchors(a: list[str], alo: int, ahi: int, b: list[str], blo: int, bhi: int) -> list[tuple[int, int]]:
    """Lines found exactly once on each side, the longest run of them in the same order on both."""
    in_a, in_b = Counter(a[alo:ahi]), Counter(b[blo:bhi])
    where_b = {line: j for j, line in enumerate(b[blo:bhi], blo) if in_b[line] == 1}
    pairs = [(i, where_b[line]) for i, line in enumerate(a[alo:ahi], alo) if in_a[line] == 1 and line in where_b]
    # Longest increasing subsequence of the b positions (patience sorting), with back links.
    tails: list[int] = []  # tails[k]: b position ending the best run of length k + 1
    tail_index: list[int] = []
    back: list[int] = []
    for index, (_, j) in enumerate(pairs):
        k = bisect.bisect_left(tails, j)
        back.append(tail_index[k - 1] if k else -1)
        if k == len(tails):
            tails.append(j)
            tail_index.append(index)
        else:
            tails[k], tail_index[k] = j, index
    run: list[tuple[int, int]] = []
    at = tail_index[-1] if tail_index else -1
    while at != -1:
        run.append(pairs[at])
        at = back[at]
    return run[::-1]


def matching_blocks(a: list[str], b: list[str]) -> list[Block]:
    """Like SequenceMatcher.get_matching_blocks (sorted, merged, ending with (len(a), len(b), 0)),
    at a bounded cost: see the module's docstring."""
    if _difflib_work(a, 0, len(a), b, 0, len(b)) <= DIFFLIB_BUDGET:
        return [tuple(m) for m in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()]  # type: ignore[misc]
    budget = DIFFLIB_BUDGET
    blocks: list[Block] = []
    gaps = [(0, len(a), 0, len(b))]
    while gaps:
        alo, ahi, blo, bhi = gaps.pop()
        head = 0
        while alo + head < ahi and blo + head < bhi and a[alo + head] == b[blo + head]:
            head += 1
        if head:
            blocks.append((alo, blo, head))
            alo, blo = alo + head, blo + head
        tail = 0
        while alo < ahi - tail and blo < bhi - tail and a[ahi - 1 - tail] == b[bhi - 1 - tail]:
            tail += 1
        if tail:
            blocks.append((ahi - tail, bhi - tail, tail))
            ahi, bhi = ahi - tail, bhi - tail
        if alo == ahi or blo == bhi:
            continue
        work = _difflib_work(a, alo, ahi, b, blo, bhi)
        if work <= budget:
            budget -= work
            matcher = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
            blocks.extend((alo + i, blo + j, n) for i, j, n in matcher.get_matching_blocks() if n)
            continue
        i0, j0 = alo, blo
        for i, j in _unique_anchors(a, alo, ahi, b, blo, bhi):
            blocks.append((i, j, 1))
            gaps.append((i0, i, j0, j))
            i0, j0 = i + 1, j + 1
        if (i0, j0) != (alo, blo):
            gaps.append((i0, ahi, j0, bhi))
        # else: no line to anchor on and too costly to search: the gap is one replacement
    return _merged(sorted(blocks)) + [(len(a), len(b), 0)]


def _merged(blocks: list[Block]) -> list[Block]:
    out: list[Block] = []
    for i, j, n in blocks:
        if out and out[-1][0] + out[-1][2] == i and out[-1][1] + out[-1][2] == j:
            last = out.pop()
            out.append((last[0], last[1], last[2] + n))
        else:
            out.append((i, j, n))
    return out


class _Matched(difflib.SequenceMatcher):
    """difflib's opcode grouping over matching blocks computed here (its own attribute, filled in)."""

    def __init__(self, a: list[str], b: list[str]) -> None:
        super().__init__(None, [], [], autojunk=False)
        self.a, self.b = a, b
        self.matching_blocks = matching_blocks(a, b)  # type: ignore[assignment]
        self.opcodes = None


def make_hunks(old_text: str, new_text: str, context: int = 3) -> list[Hunk]:
    old, new = split_lines(old_text), split_lines(new_text)
    matcher = _Matched(old, new)
    hunks: list[Hunk] = []
    for group in matcher.get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        i1, i2, j1, j2 = first[1], last[2], first[3], last[4]
        body: list[str] = []
        change_start = None
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                body.extend(" " + _visible(line) for line in old[a1:a2])
                continue
            change_start = a1 if change_start is None else change_start
            body.extend("-" + _visible(line) for line in old[a1:a2])
            body.extend("+" + _visible(line) for line in new[b1:b2])
        header = f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@"
        hunks.append(Hunk(old_start=i1, old=old[i1:i2], new=new[j1:j2], header=header, lines=body))
    return hunks


def apply_hunks(old_text: str, hunks: list[Hunk], selected: set[int]) -> str:
    """old_text with only the selected hunks (by index) applied."""
    old = split_lines(old_text)
    out: list[str] = []
    pos = 0
    for index, hunk in enumerate(hunks):
        out.extend(old[pos : hunk.old_start])
        out.extend(hunk.new if index in selected else hunk.old)
        pos = hunk.old_start + len(hunk.old)
    out.extend(old[pos:])
    return "".join(out)


def unified_diff(display: str, old_text: str | None, new_text: str, hunks: list[Hunk] | None = None) -> str:
    """`git diff`-style text for one file (new file when old_text is None); `hunks` if made already."""
    hunks = make_hunks(old_text or "", new_text) if hunks is None else hunks
    a = "/dev/null" if old_text is None else f"a/{display}"
    lines = [f"--- {a}", f"+++ b/{display}"]
    for hunk in hunks:
        lines.append(hunk.header)
        lines.extend(hunk.lines)
    return "\n".join(lines) + "\n"


def _visible(line: str) -> str:
    stripped = line.rstrip("\r\n")
    return stripped if line.endswith("\n") else stripped + "\n\\ No newline at end of file"


def _range(start: int, length: int) -> str:
    # Unified-diff ranges are 1-based; an empty range names the line before it.
    if length == 0:
        return f"{start},0"
    return f"{start + 1}" if length == 1 else f"{start + 1},{length}"
