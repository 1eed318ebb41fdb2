"""The slash commands an editor offers for a ribbit session (ACP `available_commands_update`): the TUI's
commands that make sense where the editor owns the screen. Modes are the protocol's own session modes."""

from __future__ import annotations

from acp.schema import AvailableCommand, AvailableCommandInput, UnstructuredCommandInput

# name -> (what it does, the hint for its argument or None)
COMMANDS: dict[str, tuple[str, str | None]] = {
    "undo": ("revert the last applied change (the undo journal, as the TUI's /undo)", None),
    "diff": ("everything this session changed, file by file", None),
    "rewind": ("back to before an earlier prompt, files and conversation: /rewind lists them, /rewind N goes back",
               "prompt number"),
    "compact": ("summarise the conversation to free the context", "what to focus on (optional)"),
    "clear": ("start a new conversation (the files stay as they are)", None),
    "init": ("ask the model to draft an AGENTS.md for this repository (shown as a diff)", None),
    "allowed": ("command prefixes that run here without asking: /allowed, /allowed revoke N", "revoke N"),
}


def available_commands() -> list[AvailableCommand]:
    return [
        AvailableCommand(
            name=name, description=text,
            input=AvailableCommandInput(root=UnstructuredCommandInput(hint=hint)) if hint else None,
        )
        for name, (text, hint) in COMMANDS.items()
    ]


def parse_command(text: str) -> tuple[str, str] | None:
    """(command, argument) when the prompt is one of these commands; None for anything else (a prompt
    that starts with a path, say, goes to the model)."""
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    name, _, arg = stripped[1:].partition(" ")
    if name not in COMMANDS or "\n" in name:
        return None
    return name, arg.strip()
