"""The session API: everything the UI (app/) uses of the agent, and nothing else (an import-linter contract
in pyproject.toml keeps app/ to this surface and agent.evaluation).

Exports are imported when first used (PEP 562), so `ribbit --help` or `ribbit doctor` does not load the
loop, the watcher or review mode.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, tuple[str, ...]] = {
    "agent.session.diagnostics": ("agent_checks",),
    "agent.diffs": ("Hunk",),
    "agent.git": ("shown",),
    "agent.undo.journal": ("Journal", "JournalError", "SessionInfo", "open_journals"),
    "agent.core.approvals": (
        "MODES", "ApprovalDecision", "ApprovalRequest", "Approver", "BashApprovalRequest", "EditApprovalRequest",
        "RejectAll", "command_prefix", "project_allow_list",
    ),
    "agent.core.crashlog": ("describe",),
    "agent.core.events": (
        "AgentEvent", "CompactionEvent", "ContextEvent", "EventSink", "ExternalChangeEvent", "MessageEvent", "ModeChanged",
        "NoticeEvent", "PrefillEvent", "ReasoningDelta", "StopReason", "SummaryEvent", "TextDelta", "ToolCallEvent",
        "ToolResultEvent", "TurnStarted", "UsageEvent", "ApprovalEvent", "WritingProgress",
    ),
    "agent.core.instructions": ("INIT_TASK",),
    "agent.core.loop": ("Limits", "no_reasoning_switch", "run_interruptibly"),
    "agent.session.review": ("ReviewSession", "review_interactively"),
    "agent.session.store": ("SavedSession", "SessionError", "SessionStore", "preview"),
    "agent.session.transcript": ("TranscriptWriter", "fanout"),
    "agent.session.workspace": (
        "ModeError", "SetupError", "Workspace", "check_repo", "check_state", "open_workspace", "outside_git",
    ),
    "agent.text": ("valid_unicode",),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'agent.session' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from agent.session.diagnostics import agent_checks
    from agent.diffs import Hunk
    from agent.git import shown
    from agent.undo.journal import Journal, JournalError, SessionInfo, open_journals
    from agent.core.approvals import (
        MODES,
        ApprovalDecision,
        ApprovalRequest,
        Approver,
        BashApprovalRequest,
        EditApprovalRequest,
        RejectAll,
        command_prefix,
        project_allow_list,
    )
    from agent.core.crashlog import describe
    from agent.core.events import (
        AgentEvent,
        ApprovalEvent,
        CompactionEvent,
        ContextEvent,
        EventSink,
        ExternalChangeEvent,
        MessageEvent,
        ModeChanged,
        NoticeEvent,
        PrefillEvent,
        ReasoningDelta,
        StopReason,
        SummaryEvent,
        TextDelta,
        ToolCallEvent,
        ToolResultEvent,
        TurnStarted,
        UsageEvent,
        WritingProgress,
    )
    from agent.core.instructions import INIT_TASK
    from agent.core.loop import Limits, no_reasoning_switch, run_interruptibly
    from agent.session.review import ReviewSession, review_interactively
    from agent.session.store import SavedSession, SessionError, SessionStore, preview
    from agent.session.transcript import TranscriptWriter, fanout
    from agent.session.workspace import (
        ModeError,
        SetupError,
        Workspace,
        check_repo,
        check_state,
        open_workspace,
        outside_git,
    )
    from agent.text import valid_unicode
