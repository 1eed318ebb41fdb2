"""The user's own slash commands: Markdown files whose name is the command and whose text is the prompt.

`.ribbit/commands/NAME.md` in the repository (the project's) and `$XDG_CONFIG_HOME/ribbit/commands/NAME.md`
(the user's, by default `~/.config/ribbit/commands/`); a project command wins over a user command of the
same name. `$ARGUMENTS` takes everything typed after the name, `$1`..`$9` its words; with neither in the
text, what was typed goes after it. An optional front matter (`---` lines) may set `mode:` (ask,
auto-edit, full-auto, plan) and `description:` (shown in /help; else the text's first line).

A project's command file may come from anyone who can push to it, and the user runs it by name without
reading it: it is read like AGENTS.md (agent.core.instructions: a plain file inside the repository, not
a link out of it or into .git/, size-capped, no control characters or chat-template markers). Used by the
TUI, `ribbit run`, and an editor's command list (`ribbit acp`).
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from agent.core.approvals import MODES
from agent.core.instructions import read_instruction_file
from agent.sandbox.config import config_path

COMMANDS_FOLDER = Path(".ribbit") / "commands"
MAX_COMMAND_BYTES = 8000  # a prompt, not a document: about 2,000 tokens
MAX_COMMANDS = 200  # per folder
SCAN_ENTRIES = 10_000  # names looked at per folder, so a folder of a million files costs nothing
DESCRIPTION_CHARS = 70
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")
_POSITIONAL = re.compile(r"\$([1-9])")


class CommandError(ValueError):
    """One line for the user: why a command file cannot be used."""


class CustomCommand(BaseModel):
    """One command file, read and checked."""

    name: str  # without the slash
    scope: str  # "project" | "user"
    path: Path
    text: str  # the prompt, front matter taken off
    description: str
    mode: str | None = None
    cut: bool = False  # the file was longer than MAX_COMMAND_BYTES

    def expand(self, arguments: str) -> str:
        """The prompt with what the user typed after the command in it."""
        arguments = arguments.strip()
        try:
            words = shlex.split(arguments)
        except ValueError:  # an unclosed quote: plain words
            words = arguments.split()
        uses = "$ARGUMENTS" in self.text or _POSITIONAL.search(self.text) is not None
        text = self.text.replace("$ARGUMENTS", arguments)
        text = _POSITIONAL.sub(lambda m: words[int(m.group(1)) - 1] if int(m.group(1)) <= len(words) else "", text)
        if arguments and not uses:
            text += "\n\n" + arguments
        return text.strip()


def user_commands_folder(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CONFIG_HOME/ribbit/commands`, beside sandbox.toml and the global AGENTS.md."""
    return config_path(environ).parent / "commands"


def parse_command(name: str, scope: str, path: Path, raw: str) -> CustomCommand:
    """A command from its file's text (already cleaned of control characters); CommandError if unusable."""
    text, meta = raw, {}
    lines = raw.split("\n")
    if lines and lines[0].strip() == "---":
        try:
            close = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
        except StopIteration:
            raise CommandError(f"/{name}: its front matter (---) is never closed") from None
        for line in lines[1:close]:
            key, sep, value = line.partition(":")
            if sep and key.strip():
                meta[key.strip().lower()] = value.strip().strip("\"'")
        text = "\n".join(lines[close + 1:])
    text = text.strip()
    if not text:
        raise CommandError(f"/{name}: the file holds no prompt")
    mode = meta.get("mode") or None
    if mode is not None and (mode not in MODES or mode == "review"):
        raise CommandError(f"/{name}: mode {mode!r} is not one of ask, auto-edit, full-auto, plan")
    first = next(line.strip() for line in text.split("\n") if line.strip())
    description = meta.get("description") or first.lstrip("# ")
    if len(description) > DESCRIPTION_CHARS:
        description = description[: DESCRIPTION_CHARS - 1] + "…"
    return CustomCommand(name=name, scope=scope, path=path, text=text, description=description, mode=mode)


def _read_folder(folder: Path, scope: str, inside: Path | None) -> tuple[dict[str, CustomCommand], list[str]]:
    found: dict[str, CustomCommand] = {}
    problems: list[str] = []
    try:
        with os.scandir(folder) as listing:
            names = sorted(e.name for e in itertools.islice(listing, SCAN_ENTRIES) if e.name.endswith(".md"))
    except OSError:
        return found, problems  # no such folder: no commands
    for file_name in names[:MAX_COMMANDS]:
        name = file_name[:-3]
        if not _NAME.fullmatch(name):
            problems.append(f"{scope} command file {file_name!r}: a command name is letters, digits, - _ . (up to 40)")
            continue
        path = folder / file_name
        text, why = read_instruction_file(path, inside)
        if text is None:
            if why:
                problems.append(f"/{name} ({scope}) is not used: {why}")
            continue
        cut = len(text.encode("utf-8")) > MAX_COMMAND_BYTES
        if cut:
            text = text.encode("utf-8")[:MAX_COMMAND_BYTES].decode("utf-8", "ignore")
        try:
            command = parse_command(name, scope, path, text)
        except CommandError as exc:
            problems.append(str(exc))
            continue
        found[name] = command.model_copy(update={"cut": cut})
    return found, problems


def load_commands(root: Path, environ: Mapping[str, str] | None = None) -> tuple[dict[str, CustomCommand], list[str]]:
    """The commands by name (project over user), and one line for each file that is not used."""
    root = root.resolve()
    user, user_problems = _read_folder(user_commands_folder(environ), "user", None)
    project, project_problems = _read_folder(root / COMMANDS_FOLDER, "project", root)
    return {**user, **project}, user_problems + project_problems
