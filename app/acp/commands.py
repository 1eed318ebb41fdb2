"""The slash commands an editor offers for a ribbit session (ACP `available_commands_update`): the TUI's
commands that make sense where the editor owns the screen, and the user's own (`.ribbit/commands/NAME.md`,
agent.session.commands; a built-in name wins). Modes are the protocol's own session modes."""

from __future__ import annotations

from collections.abc import Collection, Mapping

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


def available_commands(custom: Mapping[str, str] | None = None) -> list[AvailableCommand]:
    """The built-in commands, then the user's own (`custom`: name -> description)."""
    table = dict(COMMANDS)
    for name, description in (custom or {}).items():
        table.setdefault(name, (description, "arguments (optional)"))
    return [
        AvailableCommand(
            name=name, description=text,
            input=AvailableCommandInput(root=UnstructuredCommandInput(hint=hint)) if hint else None,
        )
        for name, (text, hint) in table.items()
    ]


def parse_command(text: str, custom: Collection[str] = ()) -> tuple[str, str] | None:
    """(command, argument) when the prompt is one of these commands or one of the user's (`custom`); None
    for anything else (a prompt that starts with a path, say, goes to the model)."""
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    name, _, arg = stripped[1:].partition(" ")
    name, _, rest = name.partition("\n")
    if name not in COMMANDS and name not in custom:
        return None
    return name, (rest + " " + arg).strip()
