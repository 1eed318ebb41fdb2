from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from agent.fs import is_binary
from agent.core.tools.base import CallSummary, Tool, ToolArgs, ToolContext, ToolError
from agent.core.tools.files import MAX_EDIT_BYTES, read_for_edit
from agent.core.tools.paths import display_path, resolve_in_root
from agent.core.tools.syntax_check import python_syntax_note


class WriteArgs(ToolArgs):
    file_path: str = Field(description="Path of the file, absolute or relative to the repository root")
    content: str = Field(description="The complete new content of the file")


def rejection_text(display: str, reason: str | None) -> str:
    text = f"The user rejected the change to {display}; nothing was written."
    return text + (f" Their reason: {reason}" if reason else "")


def partial_text(display: str, applied: list[int], total: int) -> str:
    numbers = ", ".join(str(i + 1) for i in applied)
    return (
        f"The user applied only hunk(s) {numbers} of {total} to {display}; the other hunks were "
        "rejected. Read the file again to see its current content."
    )


class WriteTool(Tool[WriteArgs]):
    name = "Write"
    description = (
        "Create a file or replace its whole content. An existing file must have been Read first. "
        "Prefer Edit for changing part of a file."
    )
    args_model = WriteArgs
    changes_files = True
    allowed_in_plan_mode = False

    @classmethod
    def summary(cls, arguments: Mapping[str, Any]) -> CallSummary:
        lines = len(str(arguments.get("content", "")).splitlines())
        return CallSummary(str(arguments.get("file_path", "")), [f"{lines} lines"], limit=200)

    def run(self, args: WriteArgs, ctx: ToolContext) -> str:
        path = resolve_in_root(ctx.root, args.file_path)
        shown = display_path(ctx.root, path)
        if path.is_dir():
            raise ToolError(f"{shown} is a directory")
        if len(args.content) > MAX_EDIT_BYTES:
            raise ToolError(f"the content is {len(args.content)} characters; Write takes at most {MAX_EDIT_BYTES}")
        old_text: str | None = None
        data: bytes | None = None
        if path.exists():
            ctx.read_state.check_writable(path, shown)
            data, _ = read_for_edit(path, shown)
            if is_binary(data):
                raise ToolError(f"{shown} is a binary file; the agent does not replace binary files")
            old_text = data.decode("utf-8")
            if old_text == args.content:
                return f"{shown} already has exactly this content; nothing changed."
        outcome = ctx.changes.propose(
            tool_call_id=ctx.tool_call_id, tool=self.name, path=path, display=shown,
            old_text=old_text, new_text=args.content, base=data,
        )
        if outcome.stale:
            raise ToolError(outcome.stale)
        if not outcome.applied:
            return rejection_text(shown, outcome.reason)
        if outcome.applied_hunks is not None:
            return partial_text(shown, outcome.applied_hunks, outcome.total_hunks) + python_syntax_note(
                path, shown, outcome.text or "")
        lines = args.content.count("\n") + (0 if args.content.endswith("\n") or not args.content else 1)
        verb = "Created" if old_text is None else "Replaced"
        return f"{verb} {shown} ({lines} lines)." + python_syntax_note(path, shown, args.content)

