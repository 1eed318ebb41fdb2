from __future__ import annotations

import difflib

from pydantic import Field

from agent.apply import detect_newline, is_binary, to_lf, with_newline
from agent.tools.base import Tool, ToolArgs, ToolContext, ToolError
from agent.tools.paths import display_path, resolve_in_root
from agent.tools.loose_match import AmbiguousLooseMatch, find_loose
from agent.tools.read import format_numbered
from agent.tools.syntax_check import python_syntax_note
from agent.tools.write import partial_text, rejection_text

CONTEXT_LINES = 3


class EditArgs(ToolArgs):
    file_path: str = Field(description="Path of the file, absolute or relative to the repository root")
    old_string: str = Field(description="Exact text to replace (must match the file, including indentation)")
    new_string: str = Field(description="The replacement text")
    replace_all: bool = Field(False, description="Replace every occurrence instead of exactly one")


def line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def occurrences(text: str, needle: str) -> list[int]:
    found, start = [], 0
    while (at := text.find(needle, start)) != -1:
        found.append(at)
        start = at + max(len(needle), 1)
    return found


def closest_region(text: str, needle: str) -> str:
    """The part of the file most like `needle`, numbered, to show the model what is really there."""
    lines = text.split("\n")
    want = needle.strip("\n").split("\n")
    probe = next((line.strip() for line in want if line.strip()), "")
    if not probe or not lines:
        return ""
    scores = [difflib.SequenceMatcher(None, probe, line.strip()).ratio() for line in lines]
    best = max(range(len(lines)), key=scores.__getitem__)
    if scores[best] < 0.4:
        return ""
    start = max(0, best - 2)
    end = min(len(lines), best + len(want) + 2)
    return format_numbered(lines[start:end], start + 1)


class EditTool(Tool[EditArgs]):
    name = "Edit"
    description = (
        "Replace old_string with new_string in a file that was Read. old_string must match exactly "
        "and be unique unless replace_all is true; include surrounding lines to make it unique."
    )
    args_model = EditArgs

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
        data = path.read_bytes()
        if is_binary(data):
            raise ToolError(f"{shown} is a binary file; the agent does not edit binary files")
        original = data.decode("utf-8")
        newline = detect_newline(original)
        # CRLF files are matched as LF and written back with CRLF.
        text, old, new = to_lf(original), to_lf(args.old_string), to_lf(args.new_string)
        found = occurrences(text, old)
        note = ""
        if not found:
            # Whitespace-only differences (indentation, tabs, trailing spaces): applied when unique.
            try:
                loose = find_loose(text, old, new)
            except AmbiguousLooseMatch as many:
                where = ", ".join(str(n) for n in many.lines[:20])
                count = str(len(many.lines)) if len(many.lines) <= 20 else "more than 20"
                raise ToolError(
                    f"old_string was not found in {shown} as written; ignoring whitespace it matches {count} "
                    f"places (starting at lines {where}). Copy the exact text from a Read, with more lines to make it unique"
                ) from None
            if loose is None:
                region = closest_region(text, old)
                hint = f"\nThe closest region of {shown}:\n{region}" if region else ""
                raise ToolError(f"old_string was not found in {shown}.{hint}")
            edited = text[: loose.start] + loose.new_text + text[loose.end :]
            found, new, note = [loose.start], loose.new_text, loose.note(shown) + "\n"
        elif len(found) > 1 and not args.replace_all:
            where = ", ".join(str(line_of(text, at)) for at in found[:20])
            raise ToolError(
                f"old_string occurs {len(found)} times in {shown} (lines {where}); "
                "add surrounding lines to make it unique, or set replace_all"
            )
        else:
            edited = text.replace(old, new) if args.replace_all else text.replace(old, new, 1)
        outcome = ctx.changes.propose(
            tool_call_id=ctx.tool_call_id, tool=self.name, path=path, display=shown,
            old_text=original, new_text=with_newline(edited, newline),
        )
        if not outcome.applied:
            return rejection_text(shown, outcome.reason)
        if outcome.applied_hunks is not None:
            return partial_text(shown, outcome.applied_hunks, outcome.total_hunks) + python_syntax_note(
                path, shown, outcome.text or "")
        first = line_of(edited, found[0])
        last = first + new.count("\n")
        lines = edited.split("\n")
        start = max(1, first - CONTEXT_LINES)
        end = min(len(lines), last + CONTEXT_LINES)
        more = f" ({len(found)} occurrences replaced; the first is shown)" if len(found) > 1 else ""
        region = format_numbered(lines[start - 1 : end], start)
        return note + f"Edited {shown}{more}. The region now reads:\n" + region + python_syntax_note(path, shown, edited)
