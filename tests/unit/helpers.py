from __future__ import annotations

from pathlib import Path

from agent.core.approvals import AllowList, ApprovalDecision, ApprovalOrchestrator, ApprovalPolicy
from agent.core.tools.changes import ChangeGate
from agent.core.tools.readstate import ReadState
from agent.sandbox.runner import LocalRunner
from agent.core.tools import ToolContext, default_tools
from agent.core.tools.base import ShellState


class ScriptedApprover:
    """Answers approval requests from a list, and remembers what it was asked."""

    def __init__(self, *decisions: ApprovalDecision) -> None:
        self.decisions = list(decisions)
        self.requests: list[object] = []

    def decide(self, request):  # type: ignore[no-untyped-def]
        self.requests.append(request)
        return self.decisions.pop(0) if self.decisions else ApprovalDecision(approved=False)


def make_ctx(root: Path, mode: str = "full-auto", approver: ScriptedApprover | None = None) -> ToolContext:
    root = root.resolve()
    read_state = ReadState()
    policy = ApprovalPolicy(mode, AllowList(None), sandboxed=True)  # type: ignore[arg-type]
    approvals = ApprovalOrchestrator(policy, approver or ScriptedApprover(), lambda event: None)
    gate = ChangeGate(root=root, approvals=approvals, read_state=read_state)
    return ToolContext(
        root=root, read_state=read_state, changes=gate, runner=LocalRunner(root), approvals=approvals,
        shell=ShellState(cwd=root),
    )


def call(ctx: ToolContext, name: str, **arguments: object) -> str:
    """Run a tool the way the loop does: validate, run, turn ToolError into `Error: ...`."""
    from agent.core.tools import ToolError

    tool = default_tools()[name]
    args = tool.args_model.model_validate(arguments)
    try:
        return tool.run(args, ctx)
    except ToolError as exc:
        return f"Error: {exc}"
