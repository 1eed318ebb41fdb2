"""The gate every Write/Edit passes: diff, ask (if the mode says so), apply atomically, record."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent.fs import WriteObserver, atomic_write, encode_text
from agent.core.approvals import ApprovalOrchestrator, EditApprovalRequest, EditNeed
from agent.diffs import apply_hunks, make_hunks, unified_diff
from agent.core.tools.readstate import ReadState
from agent.undo.runs_later import runs_later


class AgentWriteObserver(WriteObserver, Protocol):
    def agent_wrote(self, path: Path) -> None:
        """After the agent's own Write/Edit landed."""
        ...


@dataclass(frozen=True)
class ChangeOutcome:
    applied: bool
    reason: str | None = None
    # Indices of applied hunks when only some were approved; None means the whole change.
    applied_hunks: list[int] | None = None
    total_hunks: int = 0
    text: str | None = None  # what is on disk now, when applied


@dataclass
class ChangeGate:
    root: Path
    approvals: ApprovalOrchestrator
    read_state: ReadState
    # The watcher: told before each write lands and after (its bookkeeping of the agent's own writes).
    observer: AgentWriteObserver | None = None
    files_changed: set[str] = field(default_factory=set)

    def propose(
        self, *, tool_call_id: str, tool: str, path: Path, display: str, old_text: str | None, new_text: str
    ) -> ChangeOutcome:
        hunks = make_hunks(old_text or "", new_text)
        selected: list[int] | None = None
        later = runs_later(display, self.root)
        decision = self.approvals.decide(
            EditNeed(runs_later=later),
            lambda: EditApprovalRequest(
                tool_call_id=tool_call_id, tool=tool, path=display, is_new_file=old_text is None,
                diff=unified_diff(display, old_text, new_text, hunks), hunks=hunks, runs_later=later,
            ),
        )
        if decision is not None:
            if not decision.approved:
                return ChangeOutcome(applied=False, reason=decision.reason, total_hunks=len(hunks))
            if decision.hunks is not None and set(decision.hunks) != set(range(len(hunks))):
                selected = sorted(i for i in set(decision.hunks) if 0 <= i < len(hunks))
                if not selected:
                    return ChangeOutcome(applied=False, reason=decision.reason, total_hunks=len(hunks))
                new_text = apply_hunks(old_text or "", hunks, set(selected))
        data = encode_text(new_text, old_text)  # keeps a CRLF file CRLF
        atomic_write(path, data, observer=self.observer)
        self.read_state.record(path, data)
        self.files_changed.add(display)
        if self.observer is not None:
            self.observer.agent_wrote(path)
        return ChangeOutcome(applied=True, applied_hunks=selected, total_hunks=len(hunks), text=new_text)
