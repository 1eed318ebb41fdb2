"""The session API: everything the UI (app/) uses of the agent, and nothing else (an import-linter contract
in pyproject.toml keeps app/ to this surface and agent.evaluation). The session itself (Workspace and its
methods), the events it emits and the approvals it asks for, and the few things around a session; the
journal, the sandbox, git and the loop's insides stay behind Workspace's methods.

Exports are imported when first used (PEP 562), so `ribbit --help` or `ribbit doctor` does not load the
loop, the watcher or review mode.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, tuple[str, ...]] = {
    # The session: open one, run tasks, undo, resume; its errors.
    "agent.session.workspace": (
        "ModeError", "SetupError", "Workspace", "call_summary", "check_repo", "check_state", "open_workspace", "outside_git",
    ),
    "agent.core.loop": ("Limits",),
    "agent.session.store": ("SavedSession", "SessionError", "SessionStore"),
    "agent.session.history": ("JournalError", "journaled_sessions", "undo_session"),
    "agent.session.review": ("ReviewSession", "review_interactively"),
    # What the session tells the UI (events) and asks it (approvals); a change's hunks travel in a request.
    "agent.core.events": (
        "AgentEvent", "ApprovalEvent", "CompactionEvent", "ContextEvent", "EventSink", "ExternalChangeEvent", "MessageEvent",
        "ModeChanged", "NoticeEvent", "PrefillEvent", "ReasoningDelta", "StopReason", "SummaryEvent", "TextDelta",
        "ToolCallEvent", "ToolResultEvent", "TurnStarted", "UsageEvent", "WritingProgress",
    ),
    "agent.core.approvals": (
        "MODES", "ApprovalDecision", "ApprovalRequest", "Approver", "BashApprovalRequest", "EditApprovalRequest",
        "RejectAll", "command_prefix", "project_allow_list",
    ),
    "agent.diffs": ("Hunk",),
    # The habits of daily use: `@path`, `!command`, the user's own slash commands, `/commit`.
    "agent.session.mentions": ("MentionRefused", "mention_at_cursor"),
    "agent.session.bang": ("UserCommandResult",),
    "agent.session.commands": ("CommandError", "CustomCommand", "load_commands"),
    "agent.session.commit": ("CommitError", "CommitPlan"),
    # Around a session: the transcript file, `ribbit doctor`'s lines, an unexpected error as one line.
    "agent.session.transcript": ("TranscriptWriter", "fanout"),
    "agent.session.diagnostics": ("agent_checks",),
    "agent.core.crashlog": ("describe",),
    # `ribbit quantize --calibrate DIR`'s file list, through ribbit's hardened git (quantize never starts git).
    "agent.git": ("tracked_files",),
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
    from agent.git import tracked_files
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
    from agent.core.loop import Limits
    from agent.diffs import Hunk
    from agent.session.bang import UserCommandResult
    from agent.session.commands import CommandError, CustomCommand, load_commands
    from agent.session.commit import CommitError, CommitPlan
    from agent.session.diagnostics import agent_checks
    from agent.session.history import JournalError, journaled_sessions, undo_session
    from agent.session.mentions import MentionRefused, mention_at_cursor
    from agent.session.review import ReviewSession, review_interactively
    from agent.session.store import SavedSession, SessionError, SessionStore
    from agent.session.transcript import TranscriptWriter, fanout
    from agent.session.workspace import (
        ModeError,
        SetupError,
        Workspace,
        call_summary,
        check_repo,
        check_state,
        open_workspace,
        outside_git,
    )
