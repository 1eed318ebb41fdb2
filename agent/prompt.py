"""The system prompt: small on purpose (every token costs ~30 ms of prompt processing on 2 cores)."""

from __future__ import annotations

import json
from pathlib import Path

from models.chat import ToolSpec

AGENTS_FILES = ("AGENTS.md", "agents.md")
MAX_AGENTS_CHARS = 6000

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


def agents_notes(root: Path) -> str | None:
    """The repository's AGENTS.md, if it has one (cut to a sane size)."""
    for name in AGENTS_FILES:
        path = root / name
        if path.is_file():
            try:
                text = path.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                return None
            if len(text) > MAX_AGENTS_CHARS:
                text = text[:MAX_AGENTS_CHARS] + "\n[... AGENTS.md cut ...]"
            return text
    return None


def system_prompt(root: Path, tools: list[ToolSpec], describe_tools: bool) -> str:
    """`describe_tools` is for models whose chat template cannot list tools itself."""
    # Everything that differs between repositories comes last, so the evaluated (and saved) prompt
    # state up to it is shared by every launch of the same model.
    text = BASE
    if describe_tools:
        lines = [
            f"- {t.name}: {t.description} {json.dumps(t.parameters['properties'], separators=(',', ':'))}"
            for t in tools
        ]
        text += JSON_TOOLS.format(tools="\n".join(lines))
    text += f"\n\nThe repository root is {root}."
    notes = agents_notes(root)
    if notes:
        text += f"\n\n## Notes from the repository (AGENTS.md)\n{notes}"
    return text
