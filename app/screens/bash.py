"""Bash approval: the command, where it runs, whether it is sandboxed. Dismisses with the decision."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Footer, Static

from agent.session import ApprovalDecision, BashApprovalRequest, command_prefix
from app.screens.pacing import PacedModalScreen
from app.visible import visible


class BashApprovalScreen(PacedModalScreen[ApprovalDecision]):
    CSS_PATH = "bash.tcss"
    BINDINGS = [
        Binding("y", "approve", "Run"),
        Binding("n", "reject", "Don't run"),
        Binding("p", "allow_prefix", "Always allow prefix"),
        Binding("escape", "escape", "Stop", show=False),
    ]

    def __init__(self, request: BashApprovalRequest) -> None:
        super().__init__()
        self.request = request
        self.prefix = command_prefix(request.command)

    def compose(self) -> ComposeResult:
        req = self.request
        with Vertical(id="bash-dialog") as dialog:
            dialog.border_title = "Let it write?" if req.tried_to_write else "Run this command?"
            # All of it chosen by the model: escapes shown, not obeyed (the command runs as written).
            yield Static(Text("$ " + visible(req.command)), id="bash-command")
            if req.description:
                yield Static(Text(visible(req.description), style="italic"), id="bash-description")
            where = Text()
            where.append("in ", style="dim")
            where.append(visible(req.cwd, one_line=True))
            where.append("  ·  ", style="dim")
            where.append(req.where(), style="green" if req.sandboxed else "bold red")
            yield Static(where, id="bash-where")
            hint = Text()
            hint.append("y", style="bold")
            hint.append(" run   ")
            hint.append("n", style="bold")
            hint.append(" don't run   ")
            if not req.tried_to_write and self.prefix:
                hint.append("p", style="bold")
                hint.append(f" run it, and from now on every command starting `{visible(self.prefix, one_line=True)}` "
                            "in this project without asking, read-only (/allowed revokes)")
            elif not req.tried_to_write:
                hint.append("(a command that chains, redirects or substitutes always asks)", style="dim")
            yield Static(hint, id="bash-keys")
        yield Footer()

    def action_approve(self) -> None:
        self.dismiss(ApprovalDecision(approved=True))

    def action_reject(self) -> None:
        self.dismiss(ApprovalDecision(approved=False))

    def action_allow_prefix(self) -> None:
        if not self.prefix or self.request.tried_to_write:
            return  # nothing 'always allow' could remember (the hint says so)
        self.dismiss(ApprovalDecision(approved=True, remember="prefix"))

    def action_escape(self) -> None:
        self.dismiss(ApprovalDecision(approved=False, reason="the user stopped the agent"))
        self.app.action_stop()  # type: ignore[attr-defined]
