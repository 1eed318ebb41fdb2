from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import difflib
import heapq
import re
from dataclasses import dataclass

from pydantic import Field

from agent.fs import detect_newline, is_binary, to_lf, with_newline
from agent.core.tools.base import CallSummary, Tool, ToolArgs, ToolContext, ToolError
from agent.core.tools.files import MAX_EDIT_BYTES, read_for_edit
from agent.core.tools.paths import display_path, resolve_in_root
from agent.core.tools.loose_match import AmbiguousLooseMatch, find_loose
from agent.core.tools.read import format_numbered
from agent.core.tools.syntax_check import python_syntax_note
from agent.core.tools.write import partial_text, rejection_text

CONTEXT_LINES = 3
SHOWN_OCCURRENCES = 20
PROBE_CHARS = 200
CANDIDATES = 300
MAX_WORDS = 16


class EditArgs(ToolArgs):
    file_path: str = Field(description="Path of the file, absolute or relative to the repository root")
    old_string: str = Field(description="Exact text to replace (must match the file, including indentation)")
    new_string: str = Field(description="The replacement text")
    replace_all: bool = Field(False, description="Replace every occurrence instead of exactly one")


def line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def line_numbers(text: str, indices: list[int]) -> list[int]:
    """Line numbers of sorted indices, counting each stretch of text once."""
    numbers, line, at = [], 1, 0
    for index in indices:
        line += text.count("\n", at, index)
        at = index
        numbers.append(line)
    return numbers


def occurrences(text: str, needle: str, limit: int | None = None) -> list[int]:
    """Start of each non-overlapping occurrence of `needle` (the first `limit` of them)."""
    found: list[int] = []
    start = 0
    while (limit is None or len(found) < limit) and (at := text.find(needle, start)) != -1:
        found.append(at)
        start = at + max(len(needle), 1)
    return found


def closest_region(text: str, needle: str) -> str:
    """The part of the file most like `needle`, numbered, to show the model what is really there.

    SequenceMatcher is quadratic in what it compares, so it only sees the first PROBE_CHARS of a
    line, and only the CANDIDATES lines that share the most words with the needle's first line.
    """
    lines = text.split("\n")
    want = needle.strip("\n").split("\n")
    probe = next((line.strip() for line in want if line.strip()), "")[:PROBE_CHARS]
    if not probe or not lines:
        return ""
    words = sorted(set(re.findall(r"\w{2,}", probe)), key=len, reverse=True)[:MAX_WORDS]
    candidates = heapq.nlargest(
        CANDIDATES, range(len(lines)), key=lambda i: sum(word in lines[i] for word in words)
    ) if len(lines) > CANDIDATES else range(len(lines))
    matcher = difflib.SequenceMatcher(None, b=probe)  # b is indexed once, a varies
    best, best_score = 0, 0.0
    for index in sorted(candidates):
        matcher.set_seq1(lines[index].strip()[:PROBE_CHARS])
        if matcher.real_quick_ratio() <= best_score or matcher.quick_ratio() <= best_score:
            continue
        score = matcher.ratio()
        if score > best_score:
            best, best_score = index, score
    if best_score < 0.4:
        return ""
    start = max(0, best - 2)
    end = min(len(lines), best + len(want) + 2)
    return format_numbered(lines[start:end], start + 1)


@dataclass(frozen=True)
class AppliedEdit:
    """One Edit made on one text: what to write (`result`, in the file's own newlines) and what to report."""

    result: str
    edited: str  # the new text with LF newlines
    found: list[int]
    count: int
    new: str
    note: str


def apply_edit(original: str, args: EditArgs, shown: str) -> AppliedEdit:
    """old_string -> new_string on `original` (exact, else whitespace-loose when unique); ToolError when it does not apply."""
    newline = detect_newline(original)
    # CRLF files are matched as LF and written back with CRLF.
    text, old, new = to_lf(original), to_lf(args.old_string), to_lf(args.new_string)
    count = text.count(old)
    note = ""
    if not count:
        # Whitespace-only differences (indentation, tabs, trailing spaces): applied when unique.
        try:
            loose = find_loose(text, old, new)
        except AmbiguousLooseMatch as many:
            where = ", ".join(str(n) for n in many.lines[:20])
            places = str(len(many.lines)) if len(many.lines) <= 20 else "more than 20"
            raise ToolError(
                f"old_string was not found in {shown} as written; ignoring whitespace it matches {places} "
                f"places (starting at lines {where}). Copy the exact text from a Read, with more lines to make it unique"
            ) from None
        if loose is None:
            region = closest_region(text, old)
            hint = f"\nThe closest region of {shown}:\n{region}" if region else ""
            raise ToolError(f"old_string was not found in {shown}.{hint}")
        old, new, note = text[loose.start : loose.end], loose.new_text, loose.note(shown) + "\n"
        count = 1
    found = occurrences(text, old, SHOWN_OCCURRENCES)
    if count > 1 and not args.replace_all:
        where = ", ".join(str(line) for line in dict.fromkeys(line_numbers(text, found)))
        more = ", ..." if count > len(found) else ""
        raise ToolError(
            f"old_string occurs {count} times in {shown} (lines {where}{more}); "
            "add surrounding lines to make it unique, or set replace_all"
        )
    replaced = count if args.replace_all else 1
    if len(text) + replaced * (len(new) - len(old)) > MAX_EDIT_BYTES:
        raise ToolError(f"the edited {shown} would be over {MAX_EDIT_BYTES // 1024 // 1024} MiB; nothing was changed")
    edited = text.replace(old, new) if args.replace_all else text.replace(old, new, 1)
    return AppliedEdit(result=with_newline(edited, newline), edited=edited, found=found, count=count, new=new, note=note)


class EditTool(Tool[EditArgs]):
    name = "Edit"
    description = (
        "Replace old_string with new_string in a file that was Read. old_string must match exactly "
        "and be unique unless replace_all is true; include surrounding lines to make it unique."
    )
    args_model = EditArgs
    changes_files = True
    allowed_in_plan_mode = False

    @classmethod
    def summary(cls, arguments: Mapping[str, Any]) -> CallSummary:
        extras = ["replace_all"] if arguments.get("replace_all") else []
        return CallSummary(str(arguments.get("file_path", "")), extras, limit=200)

    def run(self, args: EditArgs, ctx: ToolContext) -> str:
        if args.old_string == args.new_string:
            raise ToolError("old_string and new_string are identical; there is nothing to change")
        if not args.old_string:
            raise ToolError("old_string is empty; use Write to create a file")
        path = resolve_in_root(ctx.root, args.file_path)
        shown = display_path(ctx.root, path)
        if not path.exists():
            raise ToolError(f"file {shown} does not exist; use Write to create it")
        if path.is_dir():
            raise ToolError(f"{shown} is a directory")
        ctx.read_state.check_writable(path, shown)
        data, _ = read_for_edit(path, shown)
        if is_binary(data):
            raise ToolError(f"{shown} is a binary file; the agent does not edit binary files")
        original = data.decode("utf-8")
        made = [apply_edit(original, args, shown)]

        def again(current: str) -> str | None:
            """The same edit on the file as it is now (it changed while the change waited): None if it no longer applies."""
            try:
                made.append(apply_edit(current, args, shown))
            except ToolError:
                return None
            return made[-1].result

        outcome = ctx.changes.propose(
            tool_call_id=ctx.tool_call_id, tool=self.name, path=path, display=shown,
            old_text=original, new_text=made[0].result, base=data, reapply=again,
        )
        if outcome.stale:
            raise ToolError(outcome.stale)
        if not outcome.applied:
            return rejection_text(shown, outcome.reason)
        if outcome.applied_hunks is not None:
            return outcome.reapplied_note + partial_text(shown, outcome.applied_hunks, outcome.total_hunks) + python_syntax_note(
                path, shown, outcome.text or "")
        done = made[-1]
        edited, found, count, new, note = done.edited, done.found, done.count, done.new, done.note
        first = line_of(edited, found[0])
        last = first + new.count("\n")
        lines = edited.split("\n")
        start = max(1, first - CONTEXT_LINES)
        end = min(len(lines), last + CONTEXT_LINES)
        more = f" ({count} occurrences replaced; the first is shown)" if count > 1 and args.replace_all else ""
        region = format_numbered(lines[start - 1 : end], start)
        return outcome.reapplied_note + note + f"Edited {shown}{more}. The region now reads:\n" + region + python_syntax_note(path, shown, edited)
