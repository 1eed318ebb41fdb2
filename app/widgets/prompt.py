"""The prompt: multi-line input, Enter sends, history on Up/Down, completion of /commands and @paths.

The commands (built-in and the user's own) and the path completer are handed down by the app
(attributes down); the widget itself runs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Static, TextArea

from agent.session import mention_at_cursor
from app.visible import visible

PathCompleter = Callable[[str], list[str]]


@dataclass
class Completion:
    """What Tab would put in place of text[start:end], and the lines the hints show."""

    start: int
    end: int
    options: list[str]  # full replacements, best first
    labels: list[tuple[str, str]]  # (shown, its help)


def completions(text: str, commands: Mapping[str, str], args: Mapping[str, tuple[str, ...]]) -> list[str]:
    """What the text typed so far can complete to (commands, then their arguments)."""
    if not text.startswith("/") or "\n" in text:
        return []
    if " " in text:
        command, _, arg = text.partition(" ")
        options = args.get(command, ())
        return [f"{command} {m}" for m in options if m.startswith(arg) and m != arg]
    return [c for c in commands if c.startswith(text) and c != text]


def completion_at(text: str, cursor: int, commands: Mapping[str, str], args: Mapping[str, tuple[str, ...]],
                  paths: PathCompleter | None) -> Completion | None:
    """The completion for the cursor's place: a /command (the whole prompt) or the `@path` it ends."""
    options = completions(text, commands, args)
    if options:
        labels = [(o, commands.get(o, "") if " " not in o else "") for o in options]
        return Completion(0, len(text), options, labels)
    found = mention_at_cursor(text, cursor) if paths is not None else None
    if found is None or paths is None:
        return None
    start, query = found
    matches = [p for p in paths(query) if p != query]
    if not matches:
        return None
    written = [f'@"{p}"' if any(c.isspace() for c in p) else "@" + p for p in matches]  # a space ends a bare @path
    return Completion(start, cursor, written, [(w, "") for w in written])


class CommandHints(Static):
    """Shown above the prompt while a slash command or an `@path` is being typed."""

    def show(self, completion: Completion | None) -> None:
        self.display = completion is not None
        if completion is None:
            return
        hint = Text()
        for i, (label, help_line) in enumerate(completion.labels):
            if i:
                hint.append("\n")
            hint.append(visible(label, one_line=True), style="bold" if i == 0 else "")
            if help_line:
                hint.append("  " + help_line, style="dim")
        hint.append("\nTab completes", style="dim italic")
        self.update(hint)


class PromptInput(TextArea):
    """Enter sends; Shift+Enter or Ctrl+J add a newline; Up on the first line walks back in history."""

    BINDINGS = [Binding("tab", "complete", "Complete", show=False)]

    @dataclass
    class Submitted(Message):
        prompt: PromptInput
        text: str

    def __init__(self, **kwargs: object) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus", **kwargs)  # type: ignore[arg-type]
        self.commands: dict[str, str] = {}  # name -> help (app.commands.command_list)
        self.command_args: dict[str, tuple[str, ...]] = {}
        self.paths: PathCompleter | None = None  # `@` completion, once a session is open
        self.prompt_history: list[str] = []
        self._history_index: int | None = None
        self._draft = ""

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.submit()
            return
        if event.key in ("shift+enter", "ctrl+j"):
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        await super()._on_key(event)

    def submit(self) -> None:
        text = self.text.strip()
        if not text:
            return
        if not self.prompt_history or self.prompt_history[-1] != text:
            self.prompt_history.append(text)
        self._history_index = None
        self._draft = ""
        self.clear()
        self.post_message(self.Submitted(self, text))

    def completion(self) -> Completion | None:
        row, column = self.cursor_location
        cursor = sum(len(line) + 1 for line in self.text.split("\n")[:row]) + column
        return completion_at(self.text, cursor, self.commands, self.command_args, self.paths)

    def action_complete(self) -> None:
        found = self.completion()
        if found is None:
            return
        choice = found.options[0]
        if found.start == 0 and choice.startswith("/"):
            self.text = choice + (" " if choice in self.command_args else "")
            self.move_cursor(self.document.end)
            return
        # An @path: replace the word the cursor ends; a folder stays open for the next part.
        text = self.text
        tail = "" if choice.endswith("/") else " "
        self.text = text[: found.start] + choice + tail + text[found.end:]
        at = found.start + len(choice) + len(tail)
        self.move_cursor((self.text.count("\n", 0, at), at - (self.text.rfind("\n", 0, at) + 1)))

    # -- history --------------------------------------------------------------------------------

    def action_cursor_up(self, select: bool = False) -> None:
        if not select and self.cursor_location[0] == 0 and self.prompt_history:
            self._recall(-1)
            return
        super().action_cursor_up(select)

    def action_cursor_down(self, select: bool = False) -> None:
        last_row = self.document.line_count - 1
        if not select and self.cursor_location[0] == last_row and self._history_index is not None:
            self._recall(+1)
            return
        super().action_cursor_down(select)

    def _recall(self, step: int) -> None:
        if self._history_index is None:
            if step > 0:
                return
            self._draft = self.text
            index = len(self.prompt_history) - 1
        else:
            index = self._history_index + step
        if index < 0:
            return
        if index >= len(self.prompt_history):
            self._history_index = None
            self.text = self._draft
        else:
            self._history_index = index
            self.text = self.prompt_history[index]
        self.move_cursor(self.document.end)
