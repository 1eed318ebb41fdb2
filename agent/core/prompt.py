"""The system prompt: small on purpose (every token costs ~30 ms of prompt processing on 2 cores)."""

from __future__ import annotations

import json
from pathlib import Path

from agent.core.instructions import ProjectInstructions, global_section, project_section
from models.chat import ToolSpec

BASE = """You are ribbit, a coding agent working in a repository. You act only through tools.
Work in steps: find and Read the relevant files, change them with Edit (or Write for new files), run \
the tests or the program with Bash, and look at the result. Paths are relative to the repository root. \
Read a file before you change it. Keep changes small and focused.
When the task is done, answer with a short summary of what you changed and make no tool call."""

JSON_TOOLS = """
## Tools
To use a tool, reply with one JSON object and nothing after it:
{{"tool": "NAME", "arguments": {{...}}}}
Available tools (arguments as JSON schema):
{tools}"""


def system_prompt(
    root: Path, tools: list[ToolSpec], describe_tools: bool, instructions: ProjectInstructions | None = None
) -> str:
    """`describe_tools` is for models whose chat template cannot list tools itself; `instructions` are
    the AGENTS.md files (agent.core.instructions), read once per session."""
    # Everything that differs between repositories comes last, so the evaluated (and saved) prompt
    # state up to it is shared by every launch of the same model.
    instructions = instructions or ProjectInstructions()
    text = BASE
    if describe_tools:
        lines = [
            f"- {t.name}: {t.description} {json.dumps(t.parameters['properties'], separators=(',', ':'))}"
            for t in tools
        ]
        text += JSON_TOOLS.format(tools="\n".join(lines))
    text += global_section(instructions)
    text += f"\n\nThe repository root is {root}."
    text += project_section(instructions)
    return text
