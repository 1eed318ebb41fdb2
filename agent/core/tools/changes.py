"""The gate every Write/Edit passes: diff, ask (if the mode says so), apply atomically, record.

An approval applies to the file as it is when approved: the write checks, in the folder it renames into
and right before the rename (agent.fs.atomic_write's `expect`), that the file still holds the bytes the
diff was made from. If it changed meanwhile (the user's editor saved while the diff was on screen), an
Edit is made again on the current content and asked about again with the new diff; a Write, or an Edit
that no longer applies, is refused with a line the model sees. Nothing is ever written from stale content.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent.fs import ChangedOnDisk, WriteObserver, atomic_write, encode_text, is_binary, read_regular
from agent.core.approvals import ApprovalOrchestrator, EditApprovalRequest, EditNeed
from agent.diffs import apply_hunks, make_hunks, unified_diff
from agent.core.tools.readstate import ReadState
from agent.undo.runs_later import runs_later

# An Edit made again on a file that keeps changing under it: after this many rounds it is refused.
MAX_REAPPLY = 3
STALE_ASKED = "{shown} changed while the change waited for approval; nothing was written. Read it again before changing it"
STALE_LATE = "{shown} changed on disk just before the write; nothing was written. Read it again before changing it"
REAPPLIED = "Note: {shown} changed while the change waited; the edit was made again on its current content{asked}.\n"

# The change made again on the file's current text (an Edit's old_string -> new_string); None: it no longer applies.
Reapply = Callable[[str], str | None]


class AgentWriteObserver(WriteObserver, Protocol):
    def agent_wrote(self, path: Path) -> None:
        """After the agent's own Write/Edit landed."""
        ...

    def changed_before_write(self, path: Path) -> None:
        """The file changed (someone else's doing) after the change was made from it and before it was
        written: the session records it as theirs before the change lands, so undo gives it back."""
        ...


@dataclass(frozen=True)
class ChangeOutcome:
    applied: bool
    reason: str | None = None
    # Indices of applied hunks when only some were approved; None means the whole change.
    applied_hunks: list[int] | None = None
    total_hunks: int = 0
    text: str | None = None  # what is on disk now, when applied
    # The file changed after the change was made from it and the change could not be made again: the
    # `Error:` text for the model (nothing was written).
    stale: str | None = None
    # The change was made again on content that changed meanwhile: the line the model is told first.
    reapplied_note: str = ""


@dataclass
class ChangeGate:
    root: Path
    approvals: ApprovalOrchestrator
    read_state: ReadState
    # The watcher: told before each write lands and after (its bookkeeping of the agent's own writes).
    observer: AgentWriteObserver | None = None
    files_changed: set[str] = field(default_factory=set)

    def propose(
        self, *, tool_call_id: str, tool: str, path: Path, display: str, old_text: str | None, new_text: str,
        base: bytes | None, reapply: Reapply | None = None,
    ) -> ChangeOutcome:
        """`base`: the bytes `old_text` was read from (None: there was no file); the write lands only while
        the file still holds them. `reapply` makes the change again on newer content (Edit; None: Write)."""
        asked_once = False
        for rounds in range(MAX_REAPPLY + 1):
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
            chosen = new_text
            if decision is not None:
                asked_once = True
                if not decision.approved:
                    return ChangeOutcome(applied=False, reason=decision.reason, total_hunks=len(hunks))
                if decision.hunks is not None and set(decision.hunks) != set(range(len(hunks))):
                    selected = sorted(i for i in set(decision.hunks) if 0 <= i < len(hunks))
                    if not selected:
                        return ChangeOutcome(applied=False, reason=decision.reason, total_hunks=len(hunks))
                    chosen = apply_hunks(old_text or "", hunks, set(selected))
            data = encode_text(chosen, old_text)  # keeps a CRLF file CRLF
            try:
                atomic_write(path, data, observer=self.observer, expect=base)
            except ChangedOnDisk:
                if self.observer is not None:  # theirs (a new version, or the file removed): an undo point first
                    self.observer.changed_before_write(path)
                now = read_regular(path)
                current = None if now is None or is_binary(now) else now.decode("utf-8")
                again = reapply(current) if reapply is not None and base is not None and current is not None else None
                if again is None or rounds == MAX_REAPPLY:
                    self.read_state.mark_stale(path)
                    return ChangeOutcome(
                        applied=False, total_hunks=len(hunks),
                        stale=(STALE_ASKED if asked_once else STALE_LATE).format(shown=display),
                    )
                old_text, new_text, base = current, again, now
                continue
            self.read_state.record(path, data)
            self.files_changed.add(display)
            if self.observer is not None:
                self.observer.agent_wrote(path)
            note = REAPPLIED.format(shown=display, asked=" and approved again" if asked_once else "") if rounds else ""
            return ChangeOutcome(
                applied=True, applied_hunks=selected, total_hunks=len(hunks), text=chosen, reapplied_note=note,
            )
        raise AssertionError("unreachable")
