"""`/commit`'s dialog: the model's draft in an editor; Ctrl+S commits it as edited, Esc commits nothing."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Footer, Static, TextArea

from app.screens.pacing import PacedModalScreen
from app.visible import visible


class CommitScreen(PacedModalScreen[str | None]):
    CSS_PATH = "commit.tcss"
    BINDINGS = [
        Binding("ctrl+s", "commit", "Commit", priority=True),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, draft: str, files: list[str]) -> None:
        super().__init__()
        self.draft, self.files = draft, files

    def compose(self) -> ComposeResult:
        with Vertical(id="commit-dialog") as dialog:
            dialog.border_title = "Commit the session's files"
            yield TextArea(self.draft, id="commit-message", soft_wrap=True, show_line_numbers=False)
            listed = ", ".join(visible(f, one_line=True) for f in self.files)
            yield Static(Text(f"files: {listed}  (your other changes stay as they are)", style="dim"), id="commit-files")
            keys = Text()
            keys.append("Ctrl+S", style="bold")
            keys.append(" commit   ")
            keys.append("Esc", style="bold")
            keys.append(" cancel")
            yield Static(keys, id="commit-keys")
        yield Footer()

    def on_mount(self) -> None:
        editor = self.query_one(TextArea)
        editor.focus()
        editor.move_cursor(editor.document.end)

    @property
    def message(self) -> str:
        return self.query_one(TextArea).text

    def action_commit(self) -> None:
        self.dismiss(self.message)

    def action_cancel(self) -> None:
        self.dismiss(None)
