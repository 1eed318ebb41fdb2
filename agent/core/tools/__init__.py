"""The five tools of docs/contract.md (Read, Write, Edit, Glob, Bash), by name: each declares its
arguments, and asks for approval through the orchestrator in its ToolContext."""

from __future__ import annotations

from agent.core.tools.base import Tool, ToolArgs, ToolContext, ToolError
from agent.core.tools.bash import BashTool
from agent.core.tools.edit import EditTool
from agent.core.tools.glob import GlobTool
from agent.core.tools.read import ReadTool
from agent.core.tools.write import WriteTool

ALL_TOOLS: tuple[type[Tool], ...] = (ReadTool, WriteTool, EditTool, GlobTool, BashTool)


def default_tools() -> dict[str, Tool]:
    return {cls.name: cls() for cls in ALL_TOOLS}


__all__ = ["ALL_TOOLS", "Tool", "ToolArgs", "ToolContext", "ToolError", "default_tools"]
