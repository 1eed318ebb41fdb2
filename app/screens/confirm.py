"""A yes/no question before the session starts (a folder outside git): y goes on, n or Esc quits."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Footer, Static

from app.screens.pacing import PacedModalScreen
from app.visible import visible


class ConfirmScreen(PacedModalScreen[bool]):
    CSS_PATH = "bash.tcss"  # the same dialog look as the Bash question
    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, title: str, text: str, yes: str, no: str) -> None:
        super().__init__()
        self.title_text, self.text, self.yes, self.no = title, text, yes, no

    def compose(self) -> ComposeResult:
        with Vertical(id="bash-dialog") as dialog:
            dialog.border_title = self.title_text
            yield Static(Text(visible(self.text)), id="bash-command")
            keys = Text()
            keys.append("y", style="bold")
            keys.append(f" {self.yes}   ")
            keys.append("n", style="bold")
            keys.append(f" {self.no}")
            yield Static(keys, id="bash-keys")
        yield Footer()

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
