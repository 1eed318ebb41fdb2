"""`/diff`: everything the session changed so far, file by file."""

from __future__ import annotations

from rich.syntax import Syntax
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

from app.screens.pacing import PacedScreen
from app.visible import visible


def count_changes(diff: str) -> tuple[int, int]:
    added = removed = 0
    for line in diff.splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return added, removed


class SessionDiffScreen(PacedScreen[str]):
    """Closes with "" (Esc), or with the text typed while it was open: typing goes on in the prompt."""

    CSS_PATH = "session_diff.tcss"
    BINDINGS = [
        Binding("escape", "close", "Close (or just type: it goes to the prompt)"),
        Binding("down", "scroll(1)", "Down", show=False),
        Binding("up", "scroll(-1)", "Up", show=False),
        Binding("pagedown", "scroll(8)", "Page down", show=False),
        Binding("pageup", "scroll(-8)", "Page up", show=False),
    ]

    def __init__(self, files: list[tuple[str, str]]) -> None:
        super().__init__()
        self.files = files

    def compose(self) -> ComposeResult:
        total_add = total_del = 0
        for _, diff in self.files:
            a, d = count_changes(diff)
            total_add, total_del = total_add + a, total_del + d
        head = Text()
        head.append("Session changes  ", style="bold")
        head.append(f"{len(self.files)} file{'s' if len(self.files) != 1 else ''}  ")
        head.append(f"+{total_add}", style="bold green")
        head.append(f" -{total_del}", style="bold red")
        yield Static(head, id="session-header")
        with VerticalScroll(id="session-files"):
            if not self.files:
                yield Static("Nothing has changed in this session yet.", id="session-empty")
            for path, diff in self.files:
                a, d = count_changes(diff)
                shown = visible(diff.rstrip("\n"))
                view = Static(Syntax(shown, "diff", theme="ansi_dark", word_wrap=False), classes="session-file")
                # A Text, not a str: a str title is Textual markup, and the path is the agent's.
                view.border_title = Text(f"{visible(path, one_line=True)}  +{a} -{d}")
                yield view
        yield Footer()

    def action_close(self) -> None:
        self.dismiss("")

    def on_key(self, event: events.Key) -> None:
        """A key that types something closes the view and goes to the prompt, where the user meant it."""
        if event.is_printable and event.character:
            event.stop()
            event.prevent_default()
            self.dismiss(event.character)

    def action_scroll(self, step: int) -> None:
        self.query_one("#session-files", VerticalScroll).scroll_relative(y=step * 3, animate=False)
