"""The main screen: transcript above, prompt and status bar below."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.widgets import TextArea

from app.messages import PromptSubmitted
from app.screens.pacing import PacedScreen
from app.widgets.prompt import CommandHints, PromptInput
from app.widgets.status_bar import StatusBar
from app.widgets.transcript import LivePanel, Transcript


PROMPT_PLACEHOLDER = "Ask ribbit…  (Enter sends, Shift+Enter/Ctrl+J newline, /help)"


class MainScreen(PacedScreen[None]):
    CSS_PATH = "main.tcss"
    AUTO_FOCUS = "#prompt"

    def __init__(self, last_input_at: Callable[[], float] = lambda: 0.0) -> None:
        super().__init__()
        self.last_input_at = last_input_at

    def compose(self) -> ComposeResult:
        yield Transcript(id="transcript")
        yield LivePanel(id="live")
        yield CommandHints(id="hints")
        yield PromptInput(id="prompt", placeholder=PROMPT_PLACEHOLDER)
        yield StatusBar(id="status")

    @property
    def transcript(self) -> Transcript:
        return self.query_one(Transcript)

    @property
    def status(self) -> StatusBar:
        return self.query_one(StatusBar)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one(PromptInput)

    def on_mount(self) -> None:
        self.query_one(CommandHints).display = False
        # The app stamps every key (RibbitApp.on_event); the transcript holds repaints back while you type.
        self.transcript.last_input_at = self.last_input_at
        self.transcript.live = self.query_one(LivePanel)

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        if isinstance(event.text_area, PromptInput):
            self.refresh_hints()

    def on_text_area_selection_changed(self, event: TextArea.SelectionChanged) -> None:
        if isinstance(event.text_area, PromptInput):
            self.refresh_hints()

    def refresh_hints(self) -> None:
        """What Tab would complete at the cursor (also after the file list was rebuilt)."""
        self.query_one(CommandHints).show(self.prompt.completion())

    def on_prompt_input_submitted(self, event: PromptInput.Submitted) -> None:
        event.stop()
        self.query_one(CommandHints).display = False
        self.app.post_message(PromptSubmitted(event.text))
