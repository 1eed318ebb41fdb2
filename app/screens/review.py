"""Diff review: one proposed Write/Edit, hunk by hunk. Dismisses with the ApprovalDecision."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Input, Static

from agent.session import ApprovalDecision, EditApprovalRequest
from app.screens.pacing import PacedScreen
from app.visible import visible
from app.widgets.diff_view import SIDE_BY_SIDE_MIN_WIDTH, HunkView, lexer_for


NARROW_HEADER_WIDTH = 100
SAID_LINES = 3


def last_words(said: str) -> str:
    """The model's last paragraph before its call, at most SAID_LINES lines, escaped; "" when it said nothing."""
    paragraphs = [p.strip() for p in said.strip().split("\n\n") if p.strip()]
    if not paragraphs:
        return ""
    lines = visible(paragraphs[-1], prose=True).splitlines()
    return "\n".join(lines[-SAID_LINES:])


class EditReviewScreen(PacedScreen[ApprovalDecision]):
    CSS_PATH = "review.tcss"
    BINDINGS = [
        Binding("y", "approve", "Approve"),
        Binding("n", "reject", "Reject"),
        Binding("space", "toggle_hunk", "Toggle hunk"),
        Binding("a", "approve_all", "Approve all (auto-edit)"),
        Binding("j,down", "move(1)", "Next hunk", show=False),
        Binding("k,up", "move(-1)", "Previous hunk", show=False),
        Binding("s", "toggle_layout", "Split/unified"),
        Binding("escape", "escape", "Stop", show=False),
    ]

    def __init__(self, request: EditApprovalRequest, said: str = "") -> None:
        super().__init__()
        self.request = request
        self.said = said
        self.cursor = 0
        self.hunk_views: list[HunkView] = []
        self._forced_layout: bool | None = None

    def compose(self) -> ComposeResult:
        req = self.request
        added = sum(h.added for h in req.hunks)
        removed = sum(h.removed for h in req.hunks)
        title = Text(no_wrap=True, overflow="ellipsis")  # one line: a long path is cut, never wrapped under the hunks
        title.append(f"{visible(req.tool, one_line=True)} ", style="bold")
        title.append(visible(req.path, one_line=True), style="bold underline")
        title.append("  (new file)" if req.is_new_file else "")
        if req.runs_later:
            title.append(f"  runs code later: {req.runs_later}", style="bold yellow")
        title.append(f"  +{added}", style="bold green")
        title.append(f" -{removed}", style="bold red")
        title.append(f"  {len(req.hunks)} hunk{'s' if len(req.hunks) != 1 else ''}", style="dim")
        with Horizontal(id="review-header"):
            yield Static(title, id="review-title")
            yield Static("", id="review-selection")
        if words := last_words(self.said):
            # The review covers the transcript: what the model said about this change stays in view.
            yield Static(Text(words, style="italic"), id="review-said")
        lexer = lexer_for(req.path)
        with VerticalScroll(id="hunks"):
            for index, hunk in enumerate(req.hunks):
                view = HunkView(hunk, index, len(req.hunks), lexer)
                self.hunk_views.append(view)
                yield view
            if not req.hunks:
                yield Static("(no textual change)", id="no-hunks")
        yield Input(placeholder="Reason for the model (optional) — Enter rejects, Esc goes back", id="reason")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#reason", Input).display = False
        self._apply_layout()
        self._show_cursor()

    def on_resize(self) -> None:
        self._apply_layout()
        self._show_selection()

    def _apply_layout(self) -> None:
        wide = self.size.width >= SIDE_BY_SIDE_MIN_WIDTH if self._forced_layout is None else self._forced_layout
        for view in self.hunk_views:
            view.side_by_side = wide

    def _show_cursor(self) -> None:
        for i, view in enumerate(self.hunk_views):
            view.current = i == self.cursor
        if self.hunk_views:
            self.hunk_views[self.cursor].scroll_visible(animate=False)
        self._show_selection()

    def _show_selection(self) -> None:
        chosen = sum(v.selected for v in self.hunk_views)
        total = len(self.hunk_views)
        # Narrow terminals (80 columns) keep the title's room: the short form says the same.
        wide = self.size.width >= NARROW_HEADER_WIDTH
        line = (f"{chosen} of {total} hunks selected · y applies them, n rejects" if wide
                else f"{chosen}/{total} selected · y/n")
        self.query_one("#review-selection", Static).update(line if self.hunk_views else "")

    # -- actions --------------------------------------------------------------------------------

    def _reason_open(self) -> bool:
        return self.query_one("#reason", Input).display

    def action_move(self, step: int) -> None:
        if self.hunk_views and not self._reason_open():
            self.cursor = max(0, min(len(self.hunk_views) - 1, self.cursor + step))
            self._show_cursor()

    def action_toggle_hunk(self) -> None:
        if self.hunk_views and not self._reason_open():
            view = self.hunk_views[self.cursor]
            view.selected = not view.selected
            self._show_cursor()

    def action_toggle_layout(self) -> None:
        current = self.hunk_views[0].side_by_side if self.hunk_views else False
        self._forced_layout = not current
        self._apply_layout()

    def selected_hunks(self) -> list[int] | None:
        chosen = [i for i, view in enumerate(self.hunk_views) if view.selected]
        return None if len(chosen) == len(self.hunk_views) else chosen

    def action_approve(self) -> None:
        if self._reason_open():
            return
        hunks = self.selected_hunks()
        if hunks == []:
            self.dismiss(ApprovalDecision(approved=False, reason="the user deselected every hunk"))
            return
        self.dismiss(ApprovalDecision(approved=True, hunks=hunks))

    def action_approve_all(self) -> None:
        if not self._reason_open():
            self.dismiss(ApprovalDecision(approved=True, hunks=None, remember="session"))

    def action_reject(self) -> None:
        reason = self.query_one("#reason", Input)
        reason.display = True
        reason.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        self.dismiss(ApprovalDecision(approved=False, reason=text or None))

    def action_escape(self) -> None:
        if self._reason_open():
            reason = self.query_one("#reason", Input)
            reason.value = ""
            reason.display = False
            self.set_focus(None)
            return
        # Esc on the review itself: reject and stop the agent (the app does the stopping).
        self.dismiss(ApprovalDecision(approved=False, reason="the user stopped the agent"))
        self.app.action_stop()  # type: ignore[attr-defined]
