"""Finding Edit's old_string when it differs from the file only in whitespace.

Small models get indentation wrong (spaces for tabs, a level off) or carry trailing spaces. When
old_string matches exactly one run of whole lines once each line's leading and trailing whitespace is
set aside, the Edit goes there, new_string is re-indented the way old_string had to be, and the
result says what was assumed. Whitespace inside a line must still match: it can mean something
(string literals, Makefile tabs), and so can a guess that is not unique, which is refused.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_LEAD = re.compile(r"[ \t]*")


class AmbiguousLooseMatch(Exception):
    """old_string matches several places once whitespace is ignored; `lines` are their first lines."""

    def __init__(self, lines: list[int]) -> None:
        super().__init__(f"{len(lines)} places")
        self.lines = lines


@dataclass(frozen=True)
class LooseMatch:
    start: int  # character offsets of the matched span in the file's text
    end: int
    first_line: int  # 1-based, the matched lines
    last_line: int
    new_text: str  # new_string, re-indented for the file
    assumptions: list[str]

    def note(self, shown: str) -> str:
        where = f"line {self.first_line}" if self.first_line == self.last_line else f"lines {self.first_line}-{self.last_line}"
        return (
            f"Note: old_string did not match {shown} exactly; it matched {where} once whitespace was set aside "
            f"({'; '.join(self.assumptions)}). Check that the region below is what you meant."
        )


def _lead(line: str) -> str:
    match = _LEAD.match(line)
    return match.group(0) if match else ""


def _blank(line: str) -> bool:
    return not line.strip()


def find_loose(text: str, old: str, new: str) -> LooseMatch | None:
    """The unique whitespace-tolerant match of `old` in `text` (both LF), or None.

    Raises AmbiguousLooseMatch when it matches in more than one place. None also when `new` cannot be
    re-indented with confidence (a line of it is less indented than old_string's least indented line).
    """
    trailing_newline = old.endswith("\n")
    old_body = old[:-1] if trailing_newline else old
    if old_body.startswith("\n") or old_body.endswith("\n") or not old_body.strip():
        return None  # blank lines at the edges: where the span starts or ends would be a guess
    old_lines = old_body.split("\n")
    want = [line.strip() for line in old_lines]
    lines = text.split("\n")
    size = len(old_lines)
    starts = _line_runs([line.strip() for line in lines], want)
    if not starts:
        return None
    if len(starts) > 1:
        raise AmbiguousLooseMatch([i + 1 for i in starts])
    first = starts[0]
    window = lines[first : first + size]
    new_body = new[:-1] if new.endswith("\n") and trailing_newline else new
    reindented = _reindent(window, old_lines, new_body.split("\n"))
    if reindented is None:
        return None
    new_lines, assumptions = reindented
    if any(w.rstrip() != w or o.rstrip() != o for w, o in zip(window, old_lines) if w != o):
        assumptions.append("trailing whitespace ignored")
    start = sum(len(line) + 1 for line in lines[:first])
    end = start + len("\n".join(window))
    new_text = "\n".join(new_lines)
    if trailing_newline and end < len(text):
        end += 1  # old_string's newline is the last matched line's
        new_text += "\n" if new.endswith("\n") else ""
    elif trailing_newline:
        assumptions.append("old_string ended with a newline where the file ends without one")
    return LooseMatch(start=start, end=end, first_line=first + 1, last_line=first + size, new_text=new_text,
                      assumptions=assumptions or ["whitespace-only lines compared as empty"])


def _line_runs(have: list[str], want: list[str], limit: int = 21) -> list[int]:
    """Where `want` occurs as consecutive whole lines of `have` (the first `limit` starts).

    One str.find over the joined lines, not a comparison at every line: a hostile file of a million
    identical lines and a long old_string cost one linear search each, not their product."""
    hay = "\n" + "\n".join(have) + "\n"
    needle = "\n" + "\n".join(want) + "\n"
    starts: list[int] = []
    line, counted_to = 0, 0
    at = hay.find(needle)
    while at != -1 and len(starts) < limit:
        line += hay.count("\n", counted_to, at + 1)  # the needle's leading newline ends line `line - 1`
        counted_to = at + 1
        starts.append(line - 1)
        at = hay.find(needle, at + 1)
    return starts


def _reindent(window: list[str], old_lines: list[str], new_lines: list[str]) -> tuple[list[str], list[str]] | None:
    """new_string's lines indented as the file is, and what was assumed; None when it cannot be told."""
    pairs = [(_lead(w), _lead(o)) for w, o in zip(window, old_lines) if not _blank(o)]
    if all(f == o for f, o in pairs):
        return new_lines, []
    file_leads = [f for f, _ in pairs]
    old_leads = [o for _, o in pairs]
    assumptions: list[str] = []
    converted = _to_style(file_leads, old_leads, new_lines)
    if converted is not None:
        old_leads, new_lines, said = converted
        assumptions.append(said)
    shifted = _shift(file_leads, old_leads, new_lines) or _rescale(file_leads, old_leads, new_lines)
    if shifted is None:
        return None
    new_lines, said = shifted
    if said:
        assumptions.append(said)
    return new_lines, assumptions


def _to_style(file_leads: list[str], old_leads: list[str], new_lines: list[str]) -> tuple[list[str], list[str], str] | None:
    """Leading tabs for spaces (or spaces for tabs) when the file and old_string indent differently."""
    file_chars, old_chars = set("".join(file_leads)), set("".join(old_leads))
    if file_chars == {"\t"} and old_chars == {" "}:
        unit = _unit([len(o) for o in old_leads])
        to_tabs = True
        said = f"the file indents with tabs where old_string had spaces; {unit} spaces taken as one tab"
    elif file_chars == {" "} and old_chars == {"\t"}:
        unit = _unit([len(f) for f in file_leads]) or 4
        to_tabs = False
        said = f"the file indents with spaces where old_string had tabs; one tab taken as {unit} spaces"
    else:
        return None
    if unit is None:
        return None

    def convert(lead: str) -> str | None:
        if to_tabs:
            return "\t" * (len(lead) // unit) if set(lead) <= {" "} and len(lead) % unit == 0 else None
        return " " * (len(lead) * unit) if set(lead) <= {"\t"} else None

    leads = [convert(o) for o in old_leads]
    lines = []
    for line in new_lines:
        lead = convert(_lead(line)) if not _blank(line) else ""
        if lead is None:
            return None
        lines.append(lead + line[len(_lead(line)) :] if not _blank(line) else line)
    if any(x is None for x in leads):
        return None
    return [x for x in leads if x is not None], lines, said


def _unit(widths: list[int]) -> int | None:
    nonzero = [w for w in widths if w]
    if not nonzero:
        return None
    unit = math.gcd(*nonzero)
    return unit if 2 <= unit <= 8 else None


def _shift(file_leads: list[str], old_leads: list[str], new_lines: list[str]) -> tuple[list[str], str] | None:
    """Move new_string as far as old_string is off: file lead = F + rest where old lead = O + rest."""
    if file_leads == old_leads:
        return new_lines, ""
    k = min(range(len(old_leads)), key=lambda i: len(old_leads[i]))
    base_old, base_file = old_leads[k], file_leads[k]
    for f, o in zip(file_leads, old_leads):
        if not o.startswith(base_old) or f != base_file + o[len(base_old) :]:
            return None  # not one shift for every line: nothing safe to assume
    out = []
    for line in new_lines:
        if _blank(line):
            out.append("")
        elif line.startswith(base_old):
            out.append(base_file + line[len(base_old) :])
        else:
            return None  # new_string goes left of old_string's margin: where to is a guess
    said = f"the file's indentation is {_describe(base_file)} where old_string had {_describe(base_old)}"
    return out, said + "; new_string was moved the same way"


def _rescale(file_leads: list[str], old_leads: list[str], new_lines: list[str]) -> tuple[list[str], str] | None:
    """Levels of a different width: old_string indents 2 spaces a level where the file indents 4."""
    if not all(set(lead) <= {" "} for lead in [*file_leads, *old_leads]):
        return None
    k = min(range(len(old_leads)), key=lambda i: len(old_leads[i]))
    base_old, base_file = len(old_leads[k]), len(file_leads[k])
    old_unit = _unit([len(o) - base_old for o in old_leads])
    file_unit = _unit([len(f) - base_file for f in file_leads])
    if old_unit is None or file_unit is None or old_unit == file_unit:
        return None
    for f, o in zip(file_leads, old_leads):
        if (len(o) - base_old) % old_unit or (len(o) - base_old) // old_unit * file_unit != len(f) - base_file:
            return None
    out = []
    for line in new_lines:
        width = len(_lead(line))
        if _blank(line):
            out.append("")
        elif set(_lead(line)) <= {" "} and width >= base_old and (width - base_old) % old_unit == 0:
            out.append(" " * (base_file + (width - base_old) // old_unit * file_unit) + line[width:])
        else:
            return None
    return out, (f"old_string indented {old_unit} spaces a level where the file indents {file_unit}; "
                 "new_string was re-indented the same way")


def _describe(lead: str) -> str:
    if not lead:
        return "none"
    tabs, spaces = lead.count("\t"), lead.count(" ")
    parts = ([f"{tabs} tab{'s' * (tabs != 1)}"] if tabs else []) + ([f"{spaces} space{'s' * (spaces != 1)}"] if spaces else [])
    return " and ".join(parts)
