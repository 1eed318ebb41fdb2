"""Unified diffs split into hunks, so a reviewer can apply some hunks of a change and not others."""

from __future__ import annotations

import difflib

from pydantic import BaseModel


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
    return text.splitlines(keepends=True)


def make_hunks(old_text: str, new_text: str, context: int = 3) -> list[Hunk]:
    old, new = split_lines(old_text), split_lines(new_text)
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    hunks: list[Hunk] = []
    for group in matcher.get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        i1, i2, j1, j2 = first[1], last[2], first[3], last[4]
        body: list[str] = []
        change_start = change_end = None
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                body.extend(" " + _visible(line) for line in old[a1:a2])
                continue
            change_start = a1 if change_start is None else change_start
            change_end = a2
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


def unified_diff(display: str, old_text: str | None, new_text: str) -> str:
    """`git diff`-style text for one file (new file when old_text is None)."""
    hunks = make_hunks(old_text or "", new_text)
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
