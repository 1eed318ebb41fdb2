"""The resume picker (`ribbit --resume`) and the `/rewind` list: choose a saved session, or one of this
session's earlier prompts and what to put back."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from agent.session import SavedSession
from app.screens.pacing import PacedScreen
from app.visible import visible, visible_line


def when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))


class SessionPickerScreen(PacedScreen[str | None]):
    """`ribbit --resume`: the repository's saved sessions, newest first; Enter opens one, Esc starts anew."""

    CSS_PATH = "sessions.tcss"
    BINDINGS = [Binding("escape", "cancel", "New session")]

    def __init__(self, sessions: list[SavedSession]) -> None:
        super().__init__()
        self.sessions = sessions

    def compose(self) -> ComposeResult:
        yield Static(Text("Resume a session  (Enter opens it, Esc starts a new one)", style="bold"), id="sessions-header")
        options = []
        for saved in self.sessions:
            label = Text()
            label.append(f"{when(saved.updated)}  ", style="dim")
            label.append(visible(saved.title(), one_line=True))
            label.append(f"  · {len(saved.tasks)} prompts · {saved.steps} turns · {visible(saved.model, one_line=True)}", style="dim")
            options.append(Option(label, id=saved.session_id))
        yield OptionList(*options, id="sessions-list")
        yield Footer()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


@dataclass
class RewindChoice:
    index: int
    files: bool
    conversation: bool


class RewindScreen(PacedScreen[RewindChoice | None]):
    """`/rewind`: the user's earlier prompts, newest first. Enter puts back the files and the conversation;
    f the files only, c the conversation only; Esc changes nothing."""

    CSS_PATH = "sessions.tcss"
    BINDINGS = [
        Binding("enter", "choose(True, True)", "Files + conversation", priority=True),
        Binding("f", "choose(True, False)", "Files only"),
        Binding("c", "choose(False, True)", "Conversation only"),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, prompts: list[str]) -> None:
        super().__init__()
        self.prompts = prompts

    def compose(self) -> ComposeResult:
        yield Static(Text("Rewind to before a prompt  (Enter: files and conversation · f: files · c: conversation)",
                          style="bold"), id="sessions-header")
        options = [
            Option(Text(f"{index + 1:>3}  ") + Text(visible_line(" ".join(prompt.split()), 100)), id=str(index))
            for index, prompt in reversed(list(enumerate(self.prompts)))
        ]
        yield OptionList(*options, id="sessions-list")
        yield Footer()

    def action_choose(self, files: bool, conversation: bool) -> None:
        options = self.query_one(OptionList)
        if options.highlighted is None:
            return
        option = options.get_option_at_index(options.highlighted)
        self.dismiss(RewindChoice(index=int(option.id or 0), files=files, conversation=conversation))

    def action_cancel(self) -> None:
        self.dismiss(None)
