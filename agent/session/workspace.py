"""One agent session on a repository: `open_workspace` wires sandbox, policy, journal and watcher, and the
`Workspace` it returns is the session API the TUI and `ribbit run` hold (they call only its methods)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import ClassVar
from pathlib import Path

from agent.fs import read_regular
from agent.core.approvals import MODES, ApprovalPolicy, Approver, Mode, project_allow_list
from agent.diffs import unified_diff
from agent.core.events import AgentEvent, CompactionEvent, EventSink, ExternalChangeEvent, NoticeEvent, SummaryEvent
from agent.git import shown
from agent.undo.journal import NAMESPACE, Journal, JournalError, UndoResult
from agent.paths import new_session_id, private_git_dir, read_only_checkout, state_problem, unsuitable_folder
from agent.core.instructions import INIT_TASK
from agent.core.loop import AgentSession, Limits, Notes, no_reasoning_switch, run_interruptibly
from agent.core.compaction import estimate_tokens, next_prompt_tokens
from agent.undo.ignored import COMPILED, OutsideChanges, is_cache
from agent.core.tools import CallSummary, tool_class
from agent.core.tools.readstate import ReadState
from agent.undo.runs_later import compiled_from_source, runs_later
from agent.session.checkout_lock import CheckoutLock
from agent.session.resume import SessionResume
from agent.sandbox.runner import CommandRunner, LocalRunner, make_runner, sandbox_available
from agent.sandbox.config import SandboxConfigError, load_settings
from agent.sandbox.output_spool import SavedOutputs
from agent.session.store import SavedSession, SessionRecorder, SessionStore
from agent.session.transcript import fanout
from agent.undo.watcher import Changes, ExternalChange, RepoWatcher
from agent.session.watched_runner import WatchedRunner
from agent.session.bang import BEFORE_STEP, USER_STEP, UserCommandResult, run_user_command
from agent.session.commands import CustomCommand, load_commands
from agent.session.commit import CommitError, CommitPlan, clean_message, draft_request, make_commit, plan_commit
from agent.session.commit import DRAFT_TOKENS
from agent.session.mentions import Attachment, FileIndex, MentionRefused, attach
from agent.core.tools.bash import fit_output
from models.base import ChatModel, ModelError, ModelInfo
from models.chat import ChatMessage, ToolCall

NOTE_MAX_PATHS = 20


class SetupError(Exception):
    """One line for the user: why a session cannot start."""


class ModeError(ValueError):
    """One line for the user: why the session cannot switch to that mode."""


@dataclass(frozen=True)
class SetupNotice:
    """A line about how the session was set up; `live` ones are also sent to the user as warnings."""

    text: str
    live: bool = False


def check_repo(repo: str | Path) -> Path:
    """The folder the agent works in, resolved; SetupError (one line) for one that is missing, not a folder,
    or no project (`/`, the home folder, a system folder: agent.paths.unsuitable_folder)."""
    root = Path(repo).expanduser()
    if not root.exists():
        raise SetupError(f"repository folder {root} does not exist")
    if not root.is_dir():
        raise SetupError(f"{root} is not a folder")
    why = unsuitable_folder(root)
    if why is not None:
        raise SetupError(why)
    return root.resolve()


def check_state() -> None:
    """SetupError (one line) when ribbit's state folder cannot be written (agent.paths.state_problem)."""
    why = state_problem()
    if why is not None:
        raise SetupError(why)


def outside_git(root: Path) -> str | None:
    """One line when `root` is not in a git repository (what undo then keeps, and where), else None."""
    from agent.git import GitError, find_repository

    try:
        if find_repository(root) is not None:
            return None
    except GitError as exc:
        return f"{root} cannot be checked for a git repository ({exc})"
    return (f"{root} is not in a git repository: ribbit keeps undo points for it in a private journal "
            f"({private_git_dir(root)}); `git init` there gives you your own history too")


def external_note(change: ExternalChange) -> str:
    """The short note the model's next turn gets."""
    shown = [p + (" (deleted)" if p in change.deleted else "") for p in change.paths[:NOTE_MAX_PATHS]]
    more = f" and {len(change.paths) - NOTE_MAX_PATHS} more" if len(change.paths) > NOTE_MAX_PATHS else ""
    return (
        "Note: files changed outside the agent since your last turn: " + ", ".join(shown) + more
        + ". Read them again before editing them."
    )


def _changes(watcher: RepoWatcher | None) -> Changes:
    """What changed since the journal's last snapshot, by whom (nothing known without a watcher)."""
    return watcher.take_since_snapshot() if watcher is not None else Changes(set(), set(), set())


def locked_sink(sink: EventSink) -> EventSink:
    """The watcher's thread emits too; one lock keeps events whole and in order for every consumer."""
    lock = threading.Lock()

    def emit(event: AgentEvent) -> None:
        with lock:
            sink(event)

    return emit


MAX_NAMED = 5
LATER_NAMED = 20  # files that run code later: each one is worth the user's look
# ctime comes from the kernel's coarse clock, which may lag time.time_ns() by a few milliseconds.
CTIME_SLACK_NS = 50_000_000


def named(paths: list[str], limit: int = MAX_NAMED) -> str:
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(shown(p) for p in paths[:limit]) + more


def writable_runs(runner: CommandRunner) -> int | None:
    """Commands so far that ran with the repository writable (None: this runner does not count them)."""
    return runner.writable_runs if isinstance(runner, LocalRunner) else None


@dataclass
class TaskReport:
    """What the user hears about the checkout when a task ends: git repositories the agent made, files
    changed outside the undo journal, changed files that run code later (agent.undo.runs_later); and
    the summary's `files_changed`: every file the agent's steps changed, by any tool, ignored ones too."""

    journal: Journal
    runner: CommandRunner
    root: Path
    known_repositories: set[str] = field(default_factory=set)
    started_ns: int = 0
    start_index: int = 0
    start_runs: int | None = None
    last: SummaryEvent | None = None  # the last task's summary as the user was told it
    runs_later: list[str] = field(default_factory=list)  # the last task's changed files that run code later

    def task_started(self) -> None:
        self.started_ns = time.time_ns() - CTIME_SLACK_NS
        self.start_index = len(self.journal.snapshots) - 1
        self.start_runs = writable_runs(self.runner)
        self.journal.mark_outside_present()
        self.journal.task_began()  # marked open now, while there is room (a step may fill the disk)

    def wrap(self, sink: EventSink) -> EventSink:
        self.known_repositories = self.journal.nested_repositories()  # the user's own, at the start

        def emit(event: AgentEvent) -> None:
            if isinstance(event, SummaryEvent):
                event = self.finish(event, sink)
            sink(event)

        return emit

    def finish(self, summary: SummaryEvent, sink: EventSink) -> SummaryEvent:
        journal = self.journal
        made = sorted(journal.nested_repositories() - self.known_repositories)
        self.known_repositories.update(made)
        if made:
            sink(NoticeEvent(level="warning", text=(
                f"the agent made a git repository in {named([m + '/' for m in made])}: git run there (a git-aware "
                "shell prompt does on cd) follows its .git/config, which can run programs; check or remove its .git first"
            )))
        journal.check_untracked_folders()  # empty folders: no step's scan went through them
        for text in journal.take_notices():
            sink(NoticeEvent(level="warning", text=text))
        runs = writable_runs(self.runner)
        report = OutsideChanges()
        if runs is None or runs != self.start_runs:
            report = journal.changed_outside(self.started_ns)
        # Tools' caches are rewritten by every test run: not named, except compiled Python, which runs
        # (a planted .pyc in .venv/.../__pycache__ is imported instead of its source).
        outside = [p for p in report.changed if not is_cache(p.rstrip("/") + "/x") or p.endswith(COMPILED)]
        if outside:
            stripped = report.stripped
            took_off = f"; setuid/setgid/sticky/world-write bits taken off {named(stripped)}" if stripped else ""
            sink(NoticeEvent(level="warning", text=(
                f"changed outside the undo journal during this task (undo cannot put them back): {named(outside)}{took_off}"
            )))
        if report.unchecked:
            listed = "; ".join(f"{shown(p)} ({why})" for p, why in report.unchecked[:MAX_NAMED])
            more = f"; and {len(report.unchecked) - MAX_NAMED} more" if len(report.unchecked) > MAX_NAMED else ""
            sink(NoticeEvent(level="warning", text=(
                f"could not check these folders outside the undo journal for changes: {listed}{more}"
            )))
        changed: list[str] = []
        if 0 <= self.start_index < len(journal.snapshots) - 1:
            try:
                changed = journal.changed_between(journal.snapshots[self.start_index], journal.snapshots[-1])
            except JournalError:
                changed = []
        # A compiled module in a cache is named unless it is its own source's compilation (a forged one runs).
        changed = [p for p in changed if not is_cache(p) or (p.endswith(COMPILED) and not compiled_from_source(self.root, p))]
        ignored = sorted(set(changed) & journal.ignored_paths())
        if ignored:
            sink(NoticeEvent(level="info", text=f"git-ignored files changed (undo puts them back; not in the patch): {named(ignored)}"))
        later = [(p, why) for p in sorted(set(changed) | set(outside)) if (why := runs_later(p.rstrip("/"), self.root))]
        self.runs_later = [p for p, _why in later]
        if later:
            listed = "; ".join(f"{shown(p)} ({why})" for p, why in later[:LATER_NAMED])
            more = f"; and {len(later) - LATER_NAMED} more" if len(later) > LATER_NAMED else ""
            sink(NoticeEvent(level="warning", text=f"changed files that run code on your machine later: {listed}{more}"))
        files = set(summary.files_changed) | {p for p in journal.agent_changed if not is_cache(p)} | set(outside)
        self.last = summary.model_copy(update={"files_changed": sorted(files)})
        journal.task_ended()  # the open mark stays if the last step is still unrecorded
        return self.last


class JournaledWrites:
    """The write observer of the agent's Write/Edit: the journal records a file it leaves outside before
    the write lands (agent.undo.journal.Journal.guard_write), then the watcher is told as before."""

    def __init__(self, journal: Journal, watcher: RepoWatcher | None, notify: Callable[[str], None] | None = None) -> None:
        self.journal = journal
        self.watcher = watcher
        self.notify = notify or (lambda line: None)

    def expect_write(self, path: Path, data: bytes | None) -> None:
        self.journal.guard_write(path)
        if self.watcher is not None:
            self.watcher.expect_write(path, data)

    def agent_wrote(self, path: Path) -> None:
        if self.watcher is not None:
            self.watcher.agent_wrote(path)

    def changed_before_write(self, path: Path) -> None:
        """The file changed while the agent's change to it waited (for approval): an undo point holding that
        version, as someone else's, before the change lands, so undoing the change gives it back."""
        if not self.journal.snapshots:
            return
        changes = Changes(set(), set(), set())
        if self.watcher is not None:
            self.watcher.sync()  # its event, delivered now, is judged as what it is: not the agent's
            changes = self.watcher.take_since_snapshot()
        try:
            changes.foreign.add(path.relative_to(self.journal.root).as_posix())
        except ValueError:
            pass
        for line in self.journal.record_step("changed outside while a change waited", *changes):
            self.notify(line)


@dataclass
class Workspace:
    """The session API: the TUI and `ribbit run` call only these methods (the agent thread runs `run`)."""

    INIT_TASK: ClassVar[str] = INIT_TASK  # `/init`: the task that drafts AGENTS.md

    session: AgentSession
    journal: Journal
    runner: CommandRunner
    watcher: RepoWatcher | None = None
    # One line each for the status bar / stderr: sandbox state, watcher method.
    sandbox_status: str = ""
    watch_status: str = ""
    notices: list[SetupNotice] = field(default_factory=list)
    # --no-sandbox: the user's own choice, so full-auto is allowed without a sandbox.
    no_sandbox: bool = False
    # Cut Bash outputs, kept outside the repository for Read to page through.
    outputs: SavedOutputs | None = None
    # The saved session (agent.session.store): resume, rewind; None when not saved.
    saved: SessionResume | None = None
    report: TaskReport | None = None
    # One writer per repository (agent.session.checkout_lock): held from the first write (or the start) to close.
    checkout: CheckoutLock | None = None
    # `@` completion's file list (agent.session.mentions), rebuilt after files come or go.
    files: FileIndex | None = None
    # `!command`s: in the sandbox (sandbox.toml's bang_sandbox) or as the user; their outputs wait here for
    # the next prompt, which hands them to the model.
    bang_sandbox: bool = False
    handed: list[str] = field(default_factory=list)
    _bang_cancel: threading.Event = field(default_factory=threading.Event)

    # -- what the UI shows ----------------------------------------------------------------------

    @property
    def model_info(self) -> ModelInfo:
        return self.session.model.info

    @property
    def limits(self) -> Limits:
        return self.session.limits

    @property
    def mode(self) -> Mode:
        return self.session.approvals.mode

    @property
    def sandboxed(self) -> bool:
        return self.runner.sandboxed

    def context_used(self) -> int:
        return self.session.model.context_used()

    def prompt_tokens(self) -> int:
        """Tokens the next turn will read (the status bar's gauge between turns, e.g. after /clear)."""
        try:
            return self.session.compactor.next_prompt()
        except ModelError:  # a template that cannot render a prompt without a user message (Qwen3.5's)
            return self.session.model.context_used()

    def reasoning_state(self) -> bool | None:
        return self.session.reasoning_state()

    # -- the conversation -----------------------------------------------------------------------

    def run(self, task: str, mentions: bool = False) -> SummaryEvent:
        """Work on `task` (blocks: call it from a worker thread); the summary as the user is told it.

        `mentions`: each `@path` in the task is attached as Read shows it (MentionRefused, one line, when one
        names a path the tools refuse: then nothing is sent). Outputs of `!command`s since the last prompt go
        with it too."""
        attached = self.attachments(task) if mentions else []
        if attached:
            self.session.sink(NoticeEvent(level="info", text="attached: " + ", ".join(a.what for a in attached)))
        handed, self.handed = self.handed, []
        summary = self.session.run(task, context=[*handed, *(a.text for a in attached)])
        if self.files is not None:
            self.files.invalidate()  # the agent may have made or removed files
        return self.report.last if self.report is not None and self.report.last is not None else summary

    def too_long(self, text: str) -> str | None:
        """Why a message cannot go to the model, or None: with the system prompt and room for an answer it
        does not fit the largest context this session may use, so a compaction could only summarise it away
        (issue 40: an over-long paste was lost so). Counted with the model's own tokens; blocks while a run
        or preload holds the model (call it from a worker thread)."""
        s = self.session
        with s.exclusive():
            budget = s.compactor.budget
            try:  # the message's share of a prompt that holds the system prompt and it (`base`: with ".")
                whole = next_prompt_tokens(s.model, [s.messages[0], ChatMessage(role="user", content=text)], s.specs,
                                           fresh=True)
                tokens = whole - budget.base
            except ModelError:
                tokens = estimate_tokens(text)
        room = budget.free - budget.turn_reserve - budget.summary_reserve
        if tokens <= room:
            return None
        return (f"the message was not sent: it is about {tokens:,} tokens and this model's context has room for "
                f"{max(0, room):,} ({budget.window:,} in all, less the system prompt and room to answer); shorten it "
                "or save it to a file in the repository and name the file")

    def attachments(self, text: str) -> list[Attachment]:
        """What each `@path` in `text` hands the model (agent.session.mentions); MentionRefused says why not."""
        session = self.session
        budget = session.output_budget()
        missing: list[str] = []
        found = attach(text, session.tool_context, budget, self.files, missing)
        if missing:
            listed = ", ".join("@" + shown(p) for p in missing)
            session.sink(NoticeEvent(level="info", text=f"no such file here, sent as text: {listed}"))
        # Each is paged like a tool result; together they must leave the conversation room to go on.
        room = min(self.limits.context, self.model_info.context_length or self.limits.context) // 2
        tokens = sum(budget.count(a.text) for a in found)
        if tokens > room:
            raise MentionRefused(f"the attached files take about {tokens} tokens, more than half the context "
                                 f"({room}); attach fewer, or name them in the prompt for the model to Read")
        return found

    def complete_path(self, query: str, limit: int = 8) -> list[str]:
        """`@` completion: repository paths matching `query` (in memory; [] until the list is built)."""
        return self.files.match(query, limit) if self.files is not None else []

    def files_stale(self) -> bool:
        """Whether the `@` file list must be (re)built: files came or went since (refresh_files does it)."""
        return self.files is not None and self.files.stale

    def refresh_files(self) -> bool:
        """Rebuild the `@` file list if files came or went (runs git: off the UI thread); True if it did."""
        if self.files is None or not self.files.stale:
            return False
        self.files.refresh()
        return True

    def custom_commands(self) -> tuple[dict[str, CustomCommand], list[str]]:
        """The user's own slash commands (agent.session.commands), read now, and lines about unusable files."""
        return load_commands(self.journal.root)

    def run_user_command(self, command: str) -> UserCommandResult:
        """`!command` (blocks: a worker thread): run it as the user does, record what it changed as the
        user's (undo never takes it back), and keep its output for the model's next prompt."""
        journal, watcher = self.journal, self.watcher
        if journal.snapshots:  # what happened before it stays apart from what it does
            for line in journal.record_step(BEFORE_STEP, *_changes(watcher)):
                self.session.sink(NoticeEvent(level="warning", text=line))
        self._bang_cancel.clear()
        root = self.session.root
        spool = self.outputs.new_spool() if self.outputs is not None else None  # the whole output, for Read
        if self.bang_sandbox:
            if watcher is not None:
                watcher.settle()  # what its overlay finds removed by others is counted from here
            inner = self.runner.inner if isinstance(self.runner, WatchedRunner) else self.runner
            ran = inner.run(command, root, 3600.0, self._bang_cancel, access="read-write", spool=spool)
            result = UserCommandResult(command=command, output=ran.output, exit_code=None if ran.cancelled else ran.exit_code,
                                       dropped_lines=ran.dropped_lines, cancelled=ran.cancelled)
        else:
            result = run_user_command(command, root, self._bang_cancel, spool)
        if watcher is not None:
            watcher.sync()
        if journal.snapshots:
            changes = _changes(watcher)
            for line in journal.record_user_step(
                f"{USER_STEP}: {command[:80]}", foreign=changes.foreign | changes.uncertain, written=changes.written,
            ):
                self.session.sink(NoticeEvent(level="warning", text=line))
        output = fit_output(result.output, result.dropped_lines, self.session.output_budget(), spool).rstrip("\n")
        self.handed.append(f"The user ran `{command}` in the repository ({result.status()}); its output:\n"
                           + (output or "(no output)"))
        if self.files is not None:
            self.files.invalidate()
        return replace(result, handed=output or "(no output)")

    def plan_commit(self) -> CommitPlan:
        """What `/commit` commits (the agent's changed files that differ from HEAD); CommitError says why not."""
        return plan_commit(self.journal, self.mode, self.session.changes.files_changed)

    def draft_commit_message(self, plan: CommitPlan) -> str:
        """The model's commit message for `plan` (blocks: a worker thread); ModelError when it fails."""
        return clean_message(self.session.answer(draft_request(plan), DRAFT_TOKENS))

    def commit(self, plan: CommitPlan, message: str) -> str:
        """Commit the plan's files with `message`; the commit id. CommitError (one line) when it fails."""
        if self.mode == "plan":
            raise CommitError("/commit is not available in plan mode")
        return make_commit(plan, message)

    def run_interruptibly(self, task: str) -> SummaryEvent:
        """`run` in a worker thread, so Ctrl+C stops the model cleanly (ribbit run); a second Ctrl+C stops
        waiting."""
        return run_interruptibly(self, task)

    def no_reasoning_switch(self) -> str:
        """What the user is told when they set reasoning on a model that cannot switch it."""
        return no_reasoning_switch(self.model_info)

    @property
    def session_id(self) -> str:
        """The session's ID: the store's record and the journal's refs (`ribbit undo ID`)."""
        return self.journal.session_id

    @property
    def root(self) -> Path:
        """The folder the session works in."""
        return self.journal.root

    def preload(self) -> bool:
        """Read the system prompt (or a resumed conversation whose saved state was not loaded) before the
        next task (blocks: call it from a worker thread); a run started meanwhile waits for it. False when
        there is nothing to do."""
        return self.session.preload()

    def cancel(self) -> None:
        """Stop the current generation, tool or `!command` (any thread)."""
        self.session.cancel()
        self._bang_cancel.set()

    def clear(self) -> None:
        """Start a new conversation: only the system prompt is kept (call it between runs); `!command`
        outputs not yet handed to the model go too."""
        self.session.clear()
        self.handed.clear()

    def set_mode(self, mode: str) -> Mode:
        """Switch the approval mode (a ModeChanged event follows); ModeError says why not."""
        if mode not in MODES or mode == "review":
            raise ModeError(f"cannot switch to {mode!r} here")
        if mode == "full-auto" and not self.runner.sandboxed and not self.no_sandbox:
            raise ModeError("full-auto needs the sandbox for Bash, and there is none")
        if mode != "plan" and (read_only := read_only_checkout(self.journal.root)) is not None:
            raise ModeError(read_only)
        self.session.approvals.set_mode(mode)  # type: ignore[arg-type]  # checked against MODES above
        return self.mode

    def set_reasoning(self, on: bool | None) -> bool:
        return self.session.set_reasoning(on)

    def allowed_prefixes(self) -> list[str]:
        """The command prefixes the user allowed in this project ('always allow', `ribbit allow`)."""
        return list(self.session.approvals.policy.allow.user)

    def revoke_prefix(self, prefix: str) -> bool:
        """Forget an allowed prefix (OSError when the list cannot be saved); False when it was not there."""
        return self.session.approvals.policy.allow.remove(prefix)

    # -- the checkout ---------------------------------------------------------------------------

    def patch(self) -> str:
        return self.journal.patch()

    def undo_last(self, uncertain_too: bool = False) -> UndoResult:
        """`/undo`: the journal's undo_last (JournalError with one line when it refuses); the watcher is
        told of each write first, so the undo is not reported as an outside change. After a step the journal
        could not record, what others changed since (the watcher saw it) is kept, never undone with it."""
        self._check_checkout()
        watcher = self.watcher
        if watcher is not None and self.journal.has_pending():
            self.journal.others_changed(*watcher.take_since_snapshot())
        result = self.journal.undo_last(observer=watcher, uncertain_too=uncertain_too)
        kept, uncertain = list(result.kept), list(result.uncertain)
        # A `!command`'s steps hold only the user's changes (kept by any undo): /undo means the agent's
        # last change, so it goes on to the step before them.
        while result.undone.startswith((USER_STEP, BEFORE_STEP)) and len(self.journal.snapshots) > 1:
            result = self.journal.undo_last(observer=watcher, uncertain_too=uncertain_too)
            kept += [p for p in result.kept if p not in kept]
            uncertain += [p for p in result.uncertain if p not in uncertain]
        return result.model_copy(update={"kept": kept, "uncertain": uncertain})

    def _check_checkout(self) -> None:
        held = self.checkout.try_take() if self.checkout is not None else None
        if held is not None:
            raise JournalError(held)

    def session_diff(self) -> list[tuple[str, str]]:
        """(path, unified diff) for each file the session changed, against the state at start. Runs git:
        call it off the UI thread."""
        journal = self.journal
        if not journal.snapshots:
            return []
        start = journal.snapshots[0]
        paths = set(self.session.changes.files_changed)
        try:
            paths.update(journal.changed_since_start())
        except JournalError:  # git trouble: fall back to the files the agent itself wrote
            pass
        out = []
        for display in sorted(paths):
            old = self._text_at(start, display)
            new_bytes = read_regular(self.session.root / display)
            new = new_bytes.decode("utf-8", "replace") if new_bytes is not None else ""
            if old == new:
                continue
            out.append((display, unified_diff(display, old, new)))
        return out

    def _text_at(self, commit: str, display: str) -> str | None:
        try:
            found = self.journal.read_blob(commit, display)
        except JournalError:
            return None
        return found[0].decode("utf-8", "replace") if found is not None else None

    def read_for_prompt(self, path: str, offset: int | None = None, limit: int | None = None) -> str:
        """A file an editor attached to a prompt (`@file`, `ribbit acp`): what a Read of it shows the model,
        cut to the same output budget, and counted as a Read for Write/Edit's rules; `Error: ...` when it
        cannot be read (outside the repository, missing, binary)."""
        from agent.core.tools import ToolError
        from agent.core.tools.read import ReadArgs

        session = self.session
        try:
            args = ReadArgs(file_path=path, offset=offset, limit=limit)
            context = session.tool_context.for_call("prompt", session.output_budget())
            return session.tools["Read"].run(args, context)
        except ToolError as exc:
            return f"Error: {exc}"
        except (OSError, ValueError) as exc:
            return f"Error: cannot read {path}: {exc}"

    def fit_for_prompt(self, text: str) -> str:
        """Text an editor attached (a selection, an unsaved buffer), cut to one tool result's output budget
        (its head kept, the cut said)."""
        budget = self.session.output_budget()
        if budget.tokens is None or budget.fits(text):
            return text
        lines = text.splitlines()
        kept = budget.head(lines, max(1, budget.tokens - 32), min_lines=1)
        return "\n".join(lines[:kept]) + (
            f"\n\n(Showing lines 1-{kept} of {len(lines)}; the rest did not fit the budget of {budget.tokens} tokens.)")

    def compact(self, focus: str = "") -> CompactionEvent:
        """`/compact [focus]`: the model summarises the conversation, which goes on from the summary."""
        return self.session.compact(focus=focus)

    def rewind(self, index: int, *, files: bool = True, conversation: bool = True) -> str:
        """`/rewind`: back to before the user's prompt `index` (agent.session.resume); one line saying what it did.
        SessionError / JournalError (one line, nothing changed) where it refuses."""
        if self.saved is None:
            from agent.session.store import SessionError

            raise SessionError("this session is not saved, so it has no rewind points")
        if files:
            self._check_checkout()
        with self.session.exclusive():  # not while a preload reads the system prompt
            return self.saved.rewind(index, files=files, conversation=conversation)

    def conversation(self) -> list[ChatMessage]:
        """The conversation after the system prompt, as the model sees it (a copy: what the UI shows)."""
        return list(self.session.messages[1:])

    def rejected_calls(self) -> set[str]:
        """The tool-call ids of this saved session the user rejected (a resumed conversation shows them so)."""
        return set(self.saved.recorder.record.rejected) if self.saved is not None else set()

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
        self.runner.close()
        if self.outputs is not None:
            self.outputs.close()
        if self.checkout is not None:
            self.checkout.release()


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
    listed: bool = True,
) -> Workspace:
    """`save`: keep the session on disk as it goes (agent.session.store: the TUI and `ribbit run` do;
    eval, review and benchmarks do not); `resume`: go on with a saved one (implies save); `listed`: the
    store lists the session for `ribbit undo` (eval lists it only where it keeps the worktree)."""
    root = check_repo(root)
    check_state()
    try:
        settings = load_settings()
    except SandboxConfigError as exc:
        raise SetupError(str(exc)) from None
    sandbox_ok, why = (False, "disabled by --no-sandbox") if no_sandbox else sandbox_available()
    if mode in ("full-auto", "review") and not sandbox_ok and not no_sandbox:
        raise SetupError(f"{mode} mode needs a sandbox for Bash, and there is none ({why}); pass --no-sandbox to run anyway")
    base_runner = make_runner(root, want_sandbox=sandbox_ok, settings=settings, model_bytes=model.info.memory_bytes)
    runner: CommandRunner = base_runner
    sandbox_status = (
        f"sandbox: {runner.name}" if runner.sandboxed
        else f"NO SANDBOX ({why}): " + (
            "Bash runs unconfined" if mode in ("full-auto", "review")
            else "Bash cannot run in plan mode" if mode == "plan" else "every Bash call asks"
        )
    )
    allow = project_allow_list(root)
    policy = ApprovalPolicy(mode, allow, sandboxed=runner.sandboxed)
    # A read-only checkout: plan mode needs no undo point (nothing may change); other modes are one line.
    read_only = read_only_checkout(root)
    if read_only is not None and mode != "plan":
        raise SetupError(read_only)
    # The session's ID is the store's record and the journal's refs: the journal is given it.
    session_id = resume.session_id if resume is not None else new_session_id()
    journal = Journal(root, session_id, namespace=journal_namespace or NAMESPACE)
    if isinstance(base_runner, LocalRunner):
        journal.limit_store(base_runner.quota)  # the journal's copies of what commands wrote count too
    checkout = CheckoutLock(journal.top, what=f"{mode} mode")
    held = checkout.try_take()
    swept = journal.sweep_temp_files() if held is None else []  # another session's writes in flight are no leftovers
    if mode == "plan":
        checkout.release()  # plan mode changes nothing: it shares (and takes the checkout at its first write)
        held = None
    if resume is not None:
        journal.resume()  # undo goes on where the session left off
    elif read_only is None:
        journal.snapshot("start")
        if listed and journal_namespace is None:  # a review's worktree journal is not the user's to undo
            SessionStore(root).note_journaled(session_id)
    journal_notices = journal.take_notices()
    recorder: SessionRecorder | None = None
    if save or resume is not None:
        recorder = SessionRecorder.resume(resume, model) if resume is not None else SessionRecorder.start(root, journal.session_id, model)
        recorder.journal_index = lambda: len(journal.snapshots) - 1
        sink = fanout([sink, recorder])
    sink = locked_sink(sink)
    report = TaskReport(journal, base_runner, root)
    session_sink = report.wrap(sink)
    read_state = ReadState()
    watcher: RepoWatcher | None = None
    notices = [SetupNotice(sandbox_status, live=not runner.sandboxed and not no_sandbox)]
    if held is not None:
        notices.append(SetupNotice(held, live=True))
    if swept:
        notices.append(SetupNotice("removed temp files left by an interrupted write: " + ", ".join(swept[:5]), live=True))
    notes = Notes()

    files = FileIndex(root, journal.git)

    def on_external(change: ExternalChange) -> None:
        files.invalidate()
        for rel in change.paths:
            read_state.mark_stale(root / rel)
        notes.add(external_note(change))
        sink(ExternalChangeEvent(paths=change.paths))

    if watch:
        watcher = RepoWatcher(root, on_external, is_ignored=journal.ignored, is_unrecorded=journal.left_outside)
        notices.append(SetupNotice(watcher.start(), live=watcher.method == "polling"))
        journal.use_ignored_hint(watcher.ignored_quiet)
        runner = WatchedRunner(runner, watcher)
    notices += [SetupNotice(line, live=True) for line in journal_notices]  # paths the start snapshot could not record
    outputs = SavedOutputs()  # cut Bash outputs, for Read to page through (outside the repository)
    session = AgentSession(
        model, root, policy=policy, approver=approver, runner=runner, sink=session_sink, limits=limits,
        read_state=read_state, write_observer=JournaledWrites(journal, watcher, lambda line: sink(NoticeEvent(level="warning", text=line))), reasoning=reasoning, outputs=outputs,
        notes=notes, after_step=snapshot_changes(journal, base_runner, watcher, sink),
    )
    session.approvals.checkout_held = checkout.try_take
    if isinstance(base_runner, LocalRunner):
        # A command's writes kept apart (agent.sandbox.overlay) are told to the watcher, which knows them by
        # content; not to the journal's guard (a command filling .venv must not pin each file into the journal).
        base_runner.write_observer = watcher
    saved: SessionResume | None = None
    session.before_task = lambda prompt: report.task_started()
    if recorder is not None:
        saved = SessionResume(session, journal, recorder)

        def before_task(prompt: str) -> None:
            # The files as they are when the prompt arrives: the point /rewind puts them back to.
            if journal.snapshots:  # none in a read-only checkout (plan mode): nothing to put back
                for line in journal.record_step("before a prompt", *_changes(watcher)):
                    sink(NoticeEvent(level="warning", text=line))
            report.task_started()
            assert recorder is not None
            recorder.before_task(prompt)

        session.before_task = before_task
        recorder.reads = lambda: read_state.saved(root)
        if resume is not None:
            saved.restore(resume)
            read_state.adopt(root, resume.reads)  # an Edit of a file read before, unchanged since, needs no new Read
        recorder.attach(session.messages)
    for notice in notices:
        # Only what the user must know about goes to the live stream; the rest is in `notices`.
        # (--no-sandbox was the user's own choice: the status bar says it, no warning needed.)
        if notice.live:
            sink(NoticeEvent(level="warning", text=notice.text))
    return Workspace(
        session=session, journal=journal, runner=runner, watcher=watcher, sandbox_status=sandbox_status,
        watch_status=watcher.message if watcher else "", notices=notices, no_sandbox=no_sandbox,
        outputs=outputs, saved=saved, report=report, files=files, bang_sandbox=settings.bang_sandbox, checkout=checkout,
    )


def call_summary(call: ToolCall) -> CallSummary | None:
    """The transcript's one-line form of a tool call, as its tool declares it (None: no such tool, or
    every argument as `name=value`)."""
    kind = tool_class(call.name)
    return kind.summary(call.arguments) if kind is not None else None


def snapshot_changes(
    journal: Journal, runner: CommandRunner, watcher: RepoWatcher | None, sink: EventSink,
) -> Callable[[int, list[ToolCall]], None]:
    """The session's after-step hook: a journal snapshot after each step that may have changed files."""
    runs = [writable_runs(runner)]

    def after_step(step: int, calls: list[ToolCall]) -> None:
        if not journal.snapshots:
            return  # no start point (plan mode in a read-only checkout): nothing may change
        # Steps with a tool that changes files are snapshotted; one that runs commands only where a command
        # ran with the repository writable (read-only runs cannot change anything).
        kinds = [tool_class(call.name) for call in calls]
        changed = any(kind is not None and kind.changes_files for kind in kinds)
        now = writable_runs(runner)
        if now is not None:
            changed |= now != runs[0]
            runs[0] = now
        else:
            changed |= any(kind is not None and kind.runs_commands for kind in kinds)
        if changed:
            for line in journal.record_step(f"step {step}", *_changes(watcher)):
                sink(NoticeEvent(level="warning", text=line))

    return after_step
