"""A sixth tool, as a newcomer would add it: this module, and one entry in agent.core.tools.TOOLS (the
test puts it there). Its traits say the rest: it changes files, plan mode refuses it, and the
transcript shows its path and the size of what it writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from agent.core.tools.base import CallSummary, Tool, ToolArgs, ToolContext, ToolError
from agent.core.tools.paths import display_path, resolve_in_root


class StampArgs(ToolArgs):
    file_path: str = Field(description="the new file")
    text: str = Field(description="what it holds")


class StampTool(Tool[StampArgs]):
    name = "Stamp"
    description = "Create a new file holding `text` (never replaces one)."
    args_model = StampArgs
    changes_files = True
    allowed_in_plan_mode = False

    @classmethod
    def summary(cls, arguments: Mapping[str, Any]) -> CallSummary:
        return CallSummary(str(arguments.get("file_path", "")), [f"{len(str(arguments.get('text', '')))} chars"], limit=200)

    def run(self, args: StampArgs, ctx: ToolContext) -> str:
        path = resolve_in_root(ctx.root, args.file_path)
        shown = display_path(ctx.root, path)
        if path.exists():
            raise ToolError(f"{shown} exists; Stamp only creates files")
        outcome = ctx.changes.propose(
            tool_call_id=ctx.tool_call_id, tool=self.name, path=path, display=shown, old_text=None, new_text=args.text,
            base=None,  # a new file: the write lands only while nothing is there
        )
        return f"stamped {shown}" if outcome.applied else f"the user rejected {shown}"
