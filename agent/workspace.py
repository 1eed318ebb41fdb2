"""Wiring one agent session onto a repository: sandbox, policy, journal. Used by the TUI and `ribbit run`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from agent.approvals import AllowList, ApprovalPolicy, Approver, Mode
from agent.events import EventSink
from agent.journal import Journal, state_home
from agent.loop import AgentSession, Limits
from agent.sandbox import CommandRunner, bwrap_works, make_runner
from models.base import ChatModel
from models.chat import ToolCall

# Tools whose calls may change files; only steps with one of them are snapshotted.
CHANGING_TOOLS = frozenset({"Write", "Edit", "Bash"})


class SetupError(Exception):
    """One line for the user: why a session cannot start."""


def project_state(root: Path) -> Path:
    """Per-project settings folder (kept outside the repository, so nothing leaks into commits)."""
    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return state_home() / "projects" / f"{root.resolve().name}-{key}"


def check_repo(repo: str | Path) -> Path:
    root = Path(repo).expanduser()
    if not root.exists():
        raise SetupError(f"repository folder {root} does not exist")
    if not root.is_dir():
        raise SetupError(f"{root} is not a folder")
    return root.resolve()


@dataclass
class Workspace:
    session: AgentSession
    journal: Journal
    runner: CommandRunner

    def patch(self) -> str:
        return self.journal.patch()


def open_workspace(
    model: ChatModel,
    root: Path,
    *,
    mode: Mode,
    approver: Approver,
    sink: EventSink,
    limits: Limits | None = None,
    no_sandbox: bool = False,
) -> Workspace:
    root = check_repo(root)
    sandbox_ok, why = (False, "disabled by --no-sandbox") if no_sandbox else bwrap_works()
    if mode in ("full-auto", "review") and not sandbox_ok and not no_sandbox:
        raise SetupError(f"{mode} mode needs a sandbox for Bash, and there is none ({why}); pass --no-sandbox to run anyway")
    runner = make_runner(root, want_sandbox=sandbox_ok)
    allow = AllowList(project_state(root) / "allow.json")
    policy = ApprovalPolicy(mode, allow, sandboxed=runner.sandboxed)
    journal = Journal(root)
    journal.snapshot("start")
    session = AgentSession(
        model, root, policy=policy, approver=approver, runner=runner, sink=sink, limits=limits,
    )

    def after_step(step: int, calls: list[ToolCall]) -> None:
        if any(call.name in CHANGING_TOOLS for call in calls):
            journal.snapshot(f"step {step}")

    session.after_step = after_step
    return Workspace(session=session, journal=journal, runner=runner)
