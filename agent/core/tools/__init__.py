"""The five tools of docs/contract.md (Read, Write, Edit, Glob, Bash), by name: each declares its
arguments and traits (agent.core.tools.base.Tool), and asks for approval through the orchestrator in its
ToolContext. A new tool is its own module plus one entry in ALL_TOOLS (TOOLS, by name, is what
sessions, approvals and the transcript look up)."""

from __future__ import annotations

from agent.core.tools.base import CallSummary, Tool, ToolArgs, ToolContext, ToolError
from agent.core.tools.bash import BashTool
from agent.core.tools.edit import EditTool
from agent.core.tools.glob import GlobTool
from agent.core.tools.read import ReadTool
from agent.core.tools.write import WriteTool

ALL_TOOLS: tuple[type[Tool], ...] = (ReadTool, WriteTool, EditTool, GlobTool, BashTool)
# Every tool a session offers, by name (the order is the prompt's).
TOOLS: dict[str, type[Tool]] = {cls.name: cls for cls in ALL_TOOLS}


def default_tools() -> dict[str, Tool]:
    return {name: cls() for name, cls in TOOLS.items()}


def tool_class(name: str) -> type[Tool] | None:
    """The tool a call names, for its traits (None: no such tool)."""
    return TOOLS.get(name)


__all__ = ["ALL_TOOLS", "TOOLS", "CallSummary", "Tool", "ToolArgs", "ToolContext", "ToolError", "default_tools", "tool_class"]
