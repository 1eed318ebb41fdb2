"""The prompt: multi-line input, Enter sends, history on Up/Down, slash commands with completion."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Static, TextArea

SLASH_COMMANDS: dict[str, str] = {
    "/help": "show keys and commands",
    "/diff": "everything this session changed, file by file",
    "/undo": "revert the last applied change",
    "/rewind": "back to before an earlier prompt: its files, the conversation, or both",
    "/compact": "summarise the conversation to free the context: /compact [what to focus on]",
    "/clear": "clear the transcript and start a new conversation",
    "/mode": "show or set the approval mode: /mode ask|auto-edit|full-auto|plan",
    "/model": "show the model in use, or switch to another: /model SPEC",
    "/allowed": "command prefixes that run here without asking: /allowed, /allowed revoke N",
    "/think": "reasoning on or off from the next turn: /think on|off",
    "/init": "ask the model to draft an AGENTS.md for this repository (shown as a diff)",
    "/quit": "quit ribbit",
}
MODE_ARGS = ("ask", "auto-edit", "full-auto", "plan")
COMMAND_ARGS: dict[str, tuple[str, ...]] = {"/mode": MODE_ARGS, "/think": ("on", "off")}


def completions(text: str) -> list[str]:
    """What the text typed so far can complete to (commands, then /mode arguments)."""
    if not text.startswith("/") or "\n" in text:
        return []
    if " " in text:
        command, _, arg = text.partition(" ")
        options = COMMAND_ARGS.get(command, ())
        return [f"{command} {m}" for m in options if m.startswith(arg) and m != arg]
    return [c for c in SLASH_COMMANDS if c.startswith(text) and c != text]


class CommandHints(Static):
    """Shown above the prompt while a slash command is being typed."""

    def show_for(self, text: str) -> None:
        options = completions(text)
        self.display = bool(options)
        if not options:
            return
        hint = Text()
        for i, option in enumerate(options):
            if i:
                hint.append("\n")
            command = option.split(" ")[0]
            hint.append(option, style="bold" if i == 0 else "")
            if " " not in option:
                hint.append("  " + SLASH_COMMANDS.get(command, ""), style="dim")
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

    def action_complete(self) -> None:
        options = completions(self.text)
        if options:
            self.text = options[0] + (" " if options[0] == "/mode" else "")
            self.move_cursor(self.document.end)

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
