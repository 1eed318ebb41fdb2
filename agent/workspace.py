"""Wiring one agent session onto a repository: sandbox, policy, journal, watcher. Used by the TUI and `ribbit run`."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path

from agent.approvals import AllowList, ApprovalPolicy, Approver, Mode
from agent.events import AgentEvent, CompactionEvent, EventSink, ExternalChangeEvent, NoticeEvent
from agent.journal import Journal, UndoResult, state_home
from agent.loop import AgentSession, Limits
from agent.readstate import ReadState
from agent.resume import SessionResume
from agent.sandbox import CommandRunner, LocalRunner, make_runner, sandbox_available
from agent.sandbox_config import SandboxConfigError, load_settings
from agent.saved_sessions import SavedSession, SessionRecorder
from agent.transcript import fanout
from agent.watcher import ExternalChange, RepoWatcher, WatchedRunner
from models.base import ChatModel
from models.chat import ToolCall

# Tools whose calls may change files; only steps with one of them are snapshotted (Bash only when
# a command ran with the repository writable: read-only runs cannot change anything).
CHANGING_TOOLS = frozenset({"Write", "Edit"})
NOTE_MAX_PATHS = 20


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


def external_note(change: ExternalChange) -> str:
    """The short note the model's next turn gets."""
    shown = [p + (" (deleted)" if p in change.deleted else "") for p in change.paths[:NOTE_MAX_PATHS]]
    more = f" and {len(change.paths) - NOTE_MAX_PATHS} more" if len(change.paths) > NOTE_MAX_PATHS else ""
    return (
        "Note: files changed outside the agent since your last turn: " + ", ".join(shown) + more
        + ". Read them again before editing them."
    )


def locked_sink(sink: EventSink) -> EventSink:
    """The watcher's thread emits too; one lock keeps events whole and in order for every consumer."""
    lock = threading.Lock()

    def emit(event: AgentEvent) -> None:
        with lock:
            sink(event)

    return emit


@dataclass
class Workspace:
    session: AgentSession
    journal: Journal
    runner: CommandRunner
    watcher: RepoWatcher | None = None
    # One line each for the status bar / stderr: sandbox state, watcher method.
    sandbox_status: str = ""
    watch_status: str = ""
    notices: list[str] = field(default_factory=list)
    # The saved session (agent.saved_sessions): resume, rewind; None when not saved.
    saved: SessionResume | None = None

    def patch(self) -> str:
        return self.journal.patch()

    def undo_last(self) -> UndoResult:
        """`/undo`: the journal's undo_last (JournalError with one line when it refuses)."""
        return self.journal.undo_last()

    def compact(self, focus: str = "") -> CompactionEvent:
        """`/compact [focus]`: the model summarises the conversation, which goes on from the summary."""
        return self.session.compact(focus=focus)

    def rewind(self, index: int, *, files: bool = True, conversation: bool = True) -> str:
        """`/rewind`: back to before the user's prompt `index` (agent.resume); one line saying what it did.
        SessionError / JournalError (one line, nothing changed) where it refuses."""
        if self.saved is None:
            from agent.saved_sessions import SessionError

            raise SessionError("this session is not saved, so it has no rewind points")
        return self.saved.rewind(index, files=files, conversation=conversation)

    def prompts(self) -> list[str]:
        """The user's prompts in this session, oldest first (what /rewind lists)."""
        return self.saved.prompts() if self.saved is not None else []

    def use_model(self, model: ChatModel) -> None:
        """`/model`: the conversation goes on with another model (saved states follow it)."""
        self.session.use_model(model)
        if self.saved is not None:
            self.saved.recorder.use_model(model)

    def close(self) -> None:
        """Stop the watcher thread and drop the runner's scratch folder; safe to call more than once."""
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
        close = getattr(self.runner, "close", None)
        if callable(close):
            close()


def open_workspace(
    model: ChatModel,
    root: Path,
    *,
    mode: Mode,
    approver: Approver,
    sink: EventSink,
    limits: Limits | None = None,
    no_sandbox: bool = False,
    watch: bool = True,
    journal_namespace: str | None = None,
    reasoning: bool | None = None,
    save: bool = False,
    resume: SavedSession | None = None,
) -> Workspace:
    """`save`: keep the session on disk as it goes (agent.saved_sessions: the TUI and `ribbit run` do;
    eval, review and benchmarks do not); `resume`: go on with a saved one (implies save)."""
    root = check_repo(root)
    try:
        settings = load_settings()
    except SandboxConfigError as exc:
        raise SetupError(str(exc)) from None
    sandbox_ok, why = (False, "disabled by --no-sandbox") if no_sandbox else sandbox_available()
    if mode in ("full-auto", "review") and not sandbox_ok and not no_sandbox:
        raise SetupError(f"{mode} mode needs a sandbox for Bash, and there is none ({why}); pass --no-sandbox to run anyway")
    base_runner = make_runner(root, want_sandbox=sandbox_ok, settings=settings)
    runner: CommandRunner = base_runner
    sandbox_status = (
        f"sandbox: {runner.name}" if runner.sandboxed
        else f"NO SANDBOX ({why}): " + ("Bash runs unconfined" if mode in ("full-auto", "review") else "every Bash call asks")
    )
    allow = AllowList(project_state(root) / "allow.json")
    policy = ApprovalPolicy(mode, allow, sandboxed=runner.sandboxed)
    journal = Journal(root, namespace=journal_namespace) if journal_namespace else Journal(root)
    swept = journal.sweep_temp_files()
    if resume is not None:
        journal.adopt(resume.session_id)  # undo goes on where the session left off
    else:
        journal.snapshot("start")
    journal_notices = journal.take_notices()
    recorder: SessionRecorder | None = None
    if save or resume is not None:
        recorder = SessionRecorder.resume(resume, model) if resume is not None else SessionRecorder.start(root, journal.session_id, model)
        recorder.journal_index = lambda: len(journal.snapshots) - 1
        sink = fanout([sink, recorder])
    sink = locked_sink(sink)
    read_state = ReadState()
    watcher: RepoWatcher | None = None
    notices = [sandbox_status]
    if swept:
        notices.append("removed temp files left by an interrupted write: " + ", ".join(swept[:5]))
    session_box: list[AgentSession] = []

    def on_external(change: ExternalChange) -> None:
        for rel in change.paths:
            read_state.mark_stale(root / rel)
        if session_box:
            session_box[0].add_note(external_note(change))
        sink(ExternalChangeEvent(paths=change.paths))

    if watch:
        watcher = RepoWatcher(root, on_external, is_ignored=journal.ignored)
        notices.append(watcher.start())
        runner = WatchedRunner(runner, watcher)
    session = AgentSession(
        model, root, policy=policy, approver=approver, runner=runner, sink=sink, limits=limits,
        read_state=read_state, on_applied=watcher.agent_wrote if watcher else None, reasoning=reasoning,
    )
    session_box.append(session)

    writable_runs = [base_runner.writable_runs if isinstance(base_runner, LocalRunner) else 0]

    def after_step(step: int, calls: list[ToolCall]) -> None:
        changed = any(call.name in CHANGING_TOOLS for call in calls)
        if isinstance(base_runner, LocalRunner):
            changed |= base_runner.writable_runs != writable_runs[0]
            writable_runs[0] = base_runner.writable_runs
        else:
            changed |= any(call.name == "Bash" for call in calls)
        if changed:
            foreign, mixed = watcher.take_since_snapshot() if watcher else (set(), set())
            for line in journal.record_step(f"step {step}", foreign=foreign, mixed=mixed):
                sink(NoticeEvent(level="warning", text=line))

    session.after_step = after_step
    saved: SessionResume | None = None
    if recorder is not None:
        saved = SessionResume(session, journal, recorder)

        def before_task(prompt: str) -> None:
            # The files as they are when the prompt arrives: the point /rewind puts them back to.
            foreign, mixed = watcher.take_since_snapshot() if watcher else (set(), set())
            for line in journal.record_step("before a prompt", foreign=foreign, mixed=mixed):
                sink(NoticeEvent(level="warning", text=line))
            assert recorder is not None
            recorder.before_task(prompt)

        session.before_task = before_task
        if resume is not None:
            saved.restore(resume)
        recorder.attach(session.messages)
    for line in notices:
        # Only what the user must know about goes to the live stream; the rest is in `notices`.
        # (--no-sandbox was the user's own choice: the status bar says it, no warning needed.)
        if (line.startswith("NO SANDBOX") and not no_sandbox) or "polling" in line or line.startswith("removed temp"):
            sink(NoticeEvent(level="warning", text=line))
    for line in journal_notices:  # paths the start snapshot could not record
        sink(NoticeEvent(level="warning", text=line))
    return Workspace(
        session=session, journal=journal, runner=runner, watcher=watcher, sandbox_status=sandbox_status,
        watch_status=watcher.message if watcher else "", notices=notices, saved=saved,
    )
