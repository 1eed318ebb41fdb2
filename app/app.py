"""The ribbit TUI: `make_app(...)` builds it for `tui_main` and for the tests.

Threads: the model is loaded and the agent runs in thread workers. The agent never touches a
widget: it talks to the bridge (app/bridge.py), which queues and pings; the app drains the queue on
its own thread and moves attributes down into the widgets. Slash commands are a table (app/commands.py).
"""

from __future__ import annotations

import gc
import threading
import time
from contextlib import suppress
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from textual import events, work
from textual.app import App
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.worker import Worker, WorkerState

from agent.session import ApprovalDecision, ApprovalRequest, BashApprovalRequest, EditApprovalRequest
from agent.session import (
    ApprovalEvent,
    CompactionEvent,
    ContextEvent,
    ExternalChangeEvent,
    MessageEvent,
    ModeChanged,
    NoticeEvent,
    PrefillEvent,
    ReasoningDelta,
    SummaryEvent,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
    TurnStarted,
    UsageEvent,
    WritingProgress,
)
from agent.session import CustomCommand, MentionRefused
from agent.session import JournalError
from agent.session import Limits
from agent.session import SavedSession, SessionError, SessionStore
from agent.session import SetupError, Workspace, open_workspace, outside_git
from app import commands
from app.args import TUI_NO_REVIEW
from app.bridge import ContextSample, EventBridge, QueueItem, TuiApprover
from app.messages import (
    ApprovalRequested, EventsReady, ModelLoaded, PromptSubmitted, RunFinished, SetupFailed, WorkspaceReady,
)
from app.screens.bash import BashApprovalScreen
from app.screens.confirm import ConfirmScreen
from app.screens.main import PROMPT_PLACEHOLDER, MainScreen
from app.screens.pacing import PacedScreen
from app.screens.review import EditReviewScreen
from app.screens.session_diff import SessionDiffScreen
from app.screens.sessions import RewindChoice, SessionPickerScreen
from app.visible import visible
from app.words import counted
from models.base import ChatModel, ModelError
from models.embedded import DEMO_LIMITS, EMBEDDED_NAME, WORKING_MODELS, demo_file_note, is_embedded
from models.backends import DEFAULT_SPECS, EngineOptions, load_model, resolve_spec, spec_forms

FIRST_RUN_HINT = f"Running {EMBEDDED_NAME}, {DEMO_LIMITS}. {WORKING_MODELS[0].upper()}{WORKING_MODELS[1:]}."
MODEL_FAILED_HINT = (f"type /model SPEC to load another ({spec_forms()}), "
                     "or quit (Ctrl+C twice) and start ribbit with --model SPEC")
CTRL_C_WINDOW_S = 2.0


class QuietCollector:
    """Runs Python's full garbage collections when nobody is typing, instead of at random.

    A full (oldest-generation) pass walks every object the session keeps, the transcript's rendered
    lines among them: 25-45 ms by the middle of a long answer on the 2-core machine, started by
    whatever allocation tips the counter, often inside the frame a keystroke waits behind. While
    the app runs, automatic full passes are off (young generations are still collected as usual)
    and `tick()` runs one once no key has come for QUIET_S, at most every EVERY_S.
    """

    QUIET_S = 2.0
    EVERY_S = 60.0
    NEVER = 1 << 30  # a generation-1 count no session reaches

    def __init__(self) -> None:
        self._saved: tuple[int, int, int] | None = None
        self.collected_at = time.monotonic()

    def start(self) -> None:
        self._saved = gc.get_threshold()
        gc.set_threshold(self._saved[0], self._saved[1], self.NEVER)

    def stop(self) -> None:
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None

    def tick(self, last_key_at: float) -> bool:
        """Collect if it is quiet and due; True when it did."""
        now = time.monotonic()
        if now - last_key_at < self.QUIET_S or now - self.collected_at < self.EVERY_S:
            return False
        gc.collect()
        self.collected_at = time.monotonic()
        return True


# -- the app -------------------------------------------------------------------------------------


@dataclass
class AppConfig:
    repo: Path
    model: str | ChatModel | None = None  # a SPEC, or an already loaded model (tests, bench)
    mode: str = "ask"
    context: int = 131_072
    no_sandbox: bool = False
    limits: Limits | None = None
    reasoning: bool | None = None  # --reasoning on|off; None: the model's default
    engine: EngineOptions = field(default_factory=EngineOptions)  # --threads, --draft, --temperature
    # `ribbit -c`: the last saved session; `--resume ID`: that one; `--resume` alone (""): a picker.
    continue_last: bool = False
    resume: str | None = None
    # `ribbit tour`: a line shown first, and a task sent as if typed once the session opens.
    intro: str | None = None
    task: str | None = None


@dataclass
class TurnStats:
    """View state for the status bar's live figures during one turn."""

    prefill_started: float | None = None
    prefill_first_done: int = 0
    first_delta_at: float | None = None
    deltas: int = 0
    shown_at: float = 0.0
    said: str = ""  # what the model wrote this turn (its last words go with a diff to review)


SAID_KEPT = 2000
CARRY_OUT_PLAN = "Carry out this plan:\n\n"
PLAN_KEY_HINT = "each edit is still shown to you first; or type to keep planning"


class RibbitApp(App[int]):
    TITLE = "ribbit"
    BINDINGS = [
        Binding("escape", "stop", "Stop", show=False),
        Binding("ctrl+c", "ctrl_c", "Quit", show=False, priority=True),
        Binding("ctrl+q", "quit_app", "Quit", show=False, priority=True),
        # Plan mode's finished plan becomes the next task in one key (as Claude Code's plan approval).
        Binding("ctrl+g", "carry_out_plan", "Carry out the plan", show=False, priority=True),
    ]

    def __init__(self, config: AppConfig) -> None:
        super().__init__()
        self.config = config
        self.bridge = EventBridge(self.post_message)
        self.approver = TuiApprover(self.bridge)
        self.workspace: Workspace | None = None
        self.model: ChatModel | None = None
        self.busy = False
        self.pending_task: str | None = None
        # Why the session could not open (the model did not load, the folder was refused): None while it
        # loads or once it is open. `model_failed`: another /model SPEC can still open it.
        self.setup_error: str | None = None
        self.model_failed = False
        self.demo_said = False
        self.rewind_from = 0  # /rewind lists the prompts from this one on (/clear moves it)
        # The last plan-mode task's final answer, until it is carried out or another task starts.
        self.finished_plan: str | None = None
        self._last_answer = ""
        self.external_paths: set[str] = set()
        self.turn = TurnStats()
        self._last_ctrl_c = 0.0
        self.last_key_at = 0.0
        self.collector = QuietCollector()
        self._agent_thread: threading.Thread | None = None
        self._preload_lock = threading.Lock()  # held while a preload reads (workers run on pooled threads)
        self.main = MainScreen(last_input_at=lambda: self.last_key_at)
        self.custom_commands: dict[str, CustomCommand] = {}
        self._told_problems: set[str] = set()  # unusable command files, said once
        self._indexing = False  # the `@` file list is being rebuilt

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key):
            self.last_key_at = time.monotonic()
            if isinstance(self.screen, PacedScreen):
                self.screen.key_arrived()  # its echo goes out unpaced (app/screens/pacing.py)
        await super().on_event(event)

    # -- lifecycle ------------------------------------------------------------------------------

    async def on_mount(self) -> None:
        await self.push_screen(self.main)
        status = self.main.status
        status.mode = self.config.mode
        limits = self.config.limits or Limits(context=self.config.context)
        status.max_steps = limits.max_steps
        self.main.prompt.commands = commands.command_list({})
        self.main.prompt.command_args = commands.command_args()
        self.collector.start()
        self.set_interval(1.0, lambda: self.collector.tick(self.last_key_at), name="quiet gc")
        self.call_after_refresh(self._start)

    async def _start(self) -> None:
        if self.config.intro:
            await self.main.transcript.add_notice(self.config.intro, "info")
        if self.config.task:
            self.pending_task = self.config.task
            await self.main.transcript.add_user(self.config.task)
        if self.config.model is None and resolve_spec(None) in DEFAULT_SPECS:
            self.demo_said = True
            await self.main.transcript.add_notice(FIRST_RUN_HINT, "info")
        if self.config.resume == "":  # `--resume` without an ID: choose
            sessions = SessionStore(self.config.repo).list()
            if sessions:
                self.push_screen(SessionPickerScreen(sessions), callback=self._picked)
                return
            await self.main.transcript.add_notice("no saved session in this repository; starting a new one")
        self.open_session(self.config.resume or None)

    def _picked(self, session_id: str | None) -> None:
        self.open_session(session_id)

    @work(thread=True, exclusive=True, group="setup")
    def open_session(self, session_id: str | None = None) -> None:
        cfg = self.config
        try:
            resume: SavedSession | None = None
            if cfg.continue_last:
                resume = SessionStore(cfg.repo).latest()
            elif session_id:
                resume = SessionStore(cfg.repo).load(session_id)
            if cfg.mode == "review":
                raise SetupError(TUI_NO_REVIEW)
            try:
                model = cfg.model if cfg.model is not None and not isinstance(cfg.model, str) else load_model(
                    cfg.model, context=cfg.context, engine=cfg.engine
                )
            except (ModelError, OSError) as exc:
                self.post_message(SetupFailed(str(exc), model=True))
                return
            self.model = model
            self.bridge.context_used = model.context_used
            workspace = open_workspace(
                model, cfg.repo, mode=cfg.mode, approver=self.approver, sink=self.bridge.sink,  # type: ignore[arg-type]
                limits=cfg.limits or Limits(context=cfg.context), no_sandbox=cfg.no_sandbox,
                reasoning=cfg.reasoning, save=True, resume=resume,
            )
        except (ModelError, SetupError, JournalError, SessionError, OSError) as exc:
            self.post_message(SetupFailed(str(exc)))
            return
        self.post_message(WorkspaceReady(workspace))

    async def on_workspace_ready(self, message: WorkspaceReady) -> None:
        workspace = self.workspace = message.workspace
        self.setup_error, self.model_failed = None, False
        status = self.main.status
        self.show_model(workspace)
        status.max_steps = workspace.limits.max_steps
        status.sandboxed = workspace.sandboxed
        status.mode = workspace.mode
        # Everything loaded so far lives for the whole session: keep it out of the collector's
        # full passes, which otherwise grow into pauses a keystroke can feel.
        gc.freeze()
        if is_embedded(workspace.model_info.path) and not self.demo_said:
            self.demo_said = True
            await self.main.transcript.add_notice(FIRST_RUN_HINT, "info")
        resumed = self.config.continue_last or bool(self.config.resume)  # asked when it was started
        not_git = None if resumed else outside_git(workspace.root)
        if not_git:  # said once, and asked: a folder that is no project is easy to start in by mistake
            await self.main.transcript.add_notice(not_git, "warning")
            self.push_screen(ConfirmScreen("Work in this folder?", not_git, "work here", "quit"), self._outside_git)
            return
        await self.session_opened()

    async def _outside_git(self, yes: bool | None) -> None:
        if not yes:
            self.action_quit_app()
            return
        await self.session_opened()

    async def session_opened(self) -> None:
        self.main.prompt.paths = self.complete_path
        self.refresh_custom_commands()
        await self.show_conversation()
        if self.pending_task is not None:
            task, self.pending_task = self.pending_task, None
            self.start_task(task)
        else:
            self.preload()

    async def show_conversation(self) -> None:
        """A resumed (or rewound) conversation in the transcript: the prompts and the model's answers."""
        assert self.workspace is not None
        transcript = self.main.transcript
        rejected = self.workspace.rejected_calls()
        for message in self.workspace.conversation():
            if message.role == "user":
                await transcript.add_user(commands.typed_part(message.content))
            elif message.role == "assistant" and message.content.strip():
                await transcript.stream_text(message.content)
                await transcript.end_turn()
            elif message.role == "assistant" and message.tool_calls:
                for call in message.tool_calls:
                    await transcript.add_tool_call(call)
            elif message.role == "tool" and message.tool_call_id:
                transcript.set_tool_result(message.tool_call_id, message.content, message.content.startswith("Error:"))
                if message.tool_call_id in rejected:
                    transcript.set_tool_rejected(message.tool_call_id)


    def show_model(self, workspace: Workspace) -> None:
        info, status, limits = workspace.model_info, self.main.status, workspace.limits
        status.model_name = info.name
        status.quantization = info.quantization
        status.threads = info.threads
        status.context_limit = min(limits.context, info.context_length or limits.context)
        status.context_allocated = info.context_allocated or 0
        status.context_used = workspace.context_used()
        status.reasoning = reasoning_label(workspace)

    async def on_setup_failed(self, message: SetupFailed) -> None:
        self.setup_error, self.model_failed = message.text, message.model
        self.pending_task = None  # it would wait for a session that is not coming
        self.main.status.model_name = "no model"
        self.main.status.activity = ""
        if message.model:
            text = f"the model did not load: {message.text}; {MODEL_FAILED_HINT}"
            self.main.prompt.placeholder = "no model loaded: /model SPEC loads one"
        else:
            text = f"ribbit cannot open this session: {message.text}"
            self.main.prompt.placeholder = "no session: quit (Ctrl+C twice) and start ribbit again as the line above says"
        await self.main.transcript.add_notice(text, "error")

    def on_unmount(self) -> None:
        self.collector.stop()
        self.shutdown_agent()
        self.close_workspace()

    def shutdown_agent(self) -> None:
        self.approver.close()
        if self.workspace is not None:
            self.workspace.cancel()

    def close_workspace(self) -> None:
        """Stop the watcher thread (after the agent has stopped)."""
        if self.workspace is not None:
            self.workspace.close()

    def join_agent(self, timeout: float = 30.0) -> None:
        """Wait for the agent thread (and a preload) to stop, so no write is cut off and no model call is
        under way when the process exits."""
        thread = self._agent_thread
        if thread is not None and thread.is_alive():
            thread.join(timeout)
        if self._preload_lock.acquire(timeout=timeout):
            self._preload_lock.release()

    @property
    def preloading(self) -> bool:
        """A preload is reading the system prompt now."""
        return self._preload_lock.locked()

    # -- running tasks --------------------------------------------------------------------------

    async def on_prompt_submitted(self, message: PromptSubmitted) -> None:
        text = message.text
        if text.startswith("/"):
            await self.run_command(text)
            return
        transcript = self.main.transcript
        if text.startswith("!") and text[1:].strip():
            await commands.user_command(self, text[1:].strip())
            return
        if self.busy:
            await transcript.add_notice("the agent is still working; press Esc to stop it first", "warning")
            return
        await transcript.add_user(text)
        if self.workspace is None and self.setup_error is not None:
            hint = MODEL_FAILED_HINT if self.model_failed else "quit (Ctrl+C twice) and start ribbit as it says"
            await transcript.add_notice(f"not sent: {self.setup_error}; {hint}", "error")
            return
        if self.workspace is None:
            self.pending_task = text
            await transcript.add_notice("the model is still loading; your message goes out when it is ready")
            return
        self.start_task(text)

    def start_task(self, task: str, mentions: bool = True) -> None:
        """`mentions`: attach the `@path`s in the task (what the user typed; not a plan the model wrote)."""
        if self.workspace is not None and is_embedded(self.workspace.model_info.path) and (note := demo_file_note(task)):
            self.call_after_refresh(self.main.transcript.add_notice, note, "warning")
        self.finished_plan = None
        self._last_answer = ""
        self.busy = True
        self.main.status.activity = "working"
        self.run_agent(task, mentions)

    @work(thread=True, group="preload")
    def preload(self) -> None:
        """Read the system prompt (or a resumed conversation whose saved state could not be loaded) while
        the user types the next task (models.base.Preloading); a task submitted meanwhile waits for it
        inside the session, the status bar showing the progress."""
        if self.workspace is None:
            return
        with self._preload_lock:
            self.workspace.preload()
            used = self.workspace.prompt_tokens()
        self.call_from_thread(self._prompt_counted, used)

    def _prompt_counted(self, used: int) -> None:
        # Here, on the UI thread, and forgiving: a worker that looked the status bar up itself raced the
        # app's shutdown (the screen's widgets already gone).
        with suppress(NoMatches):
            self.main.status.context_used = used

    @work(thread=True, exclusive=True, group="agent")
    def run_agent(self, task: str, mentions: bool = True) -> None:
        assert self.workspace is not None
        self._agent_thread = threading.current_thread()
        try:
            if (why := self.workspace.too_long(task)) is not None:
                self.post_message(RunFinished(refused=why, task=task))
                return
            self.workspace.run(task, mentions=mentions)
        except MentionRefused as exc:  # nothing was sent: the prompt comes back to be fixed
            self.call_from_thread(self._give_back_prompt, task)
            self.post_message(RunFinished(error=f"not sent: {exc}"))
            return
        except Exception as exc:  # a bug, not an observation: show it, keep the app alive
            self.post_message(RunFinished(error=f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(RunFinished())

    def _give_back_prompt(self, text: str) -> None:
        with suppress(NoMatches):
            if not self.main.prompt.text.strip():
                self.main.prompt.text = text
                self.main.prompt.move_cursor(self.main.prompt.document.end)

    # -- `@path` completion, `!command`, `/commit` ----------------------------------------------

    def complete_path(self, query: str) -> list[str]:
        """The prompt's `@` completer: in memory; a stale list is rebuilt in a worker meanwhile."""
        workspace = self.workspace
        if workspace is None:
            return []
        if workspace.files_stale() and not self._indexing:
            self._indexing = True
            self.index_files()
        return workspace.complete_path(query)

    @work(thread=True, group="files")
    def index_files(self) -> None:
        try:
            if self.workspace is not None:
                self.workspace.refresh_files()
        finally:
            self._indexing = False
        self.call_from_thread(self._files_indexed)

    def _files_indexed(self) -> None:
        with suppress(NoMatches):
            self.main.refresh_hints()

    async def finish_side_work(self, text: str, level: str = "info") -> None:
        """A `!command` or a commit step ended on a worker: the prompt is free again, and one line says how."""
        await self.drain()
        self.busy = False
        self.main.status.activity = ""
        await self.main.transcript.add_notice(text, level)

    async def on_run_finished(self, message: RunFinished) -> None:
        await self.drain()
        if not self.main.is_attached or not self.is_running:
            return
        await self.main.transcript.end_turn()
        self.busy = False
        status = self.main.status
        status.activity = ""
        status.prefill = None
        if message.error:
            await self.main.transcript.add_notice(message.error, "error")
        if message.refused:
            if message.task is not None:
                await self.main.transcript.withdraw_user(message.task)
            await self.main.transcript.add_notice(message.refused + "; your text is back in the prompt", "error")
            if message.task is not None:
                self._give_back_prompt(message.task)  # never over what the user typed since

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.notify(visible(str(event.worker.error)), title="ribbit", severity="error", markup=False)

    # -- agent events ---------------------------------------------------------------------------

    async def on_events_ready(self, _: EventsReady) -> None:
        await self.drain()

    async def drain(self) -> None:
        items, deltas = self.bridge.drain()
        if not self.main.is_attached or self._exit_renderables or not self.is_running:
            return  # shutting down: the agent's last events have nowhere to go
        if deltas:
            now = time.monotonic()
            if self.turn.first_delta_at is None:
                self.turn.first_delta_at = now
            self.turn.deltas += deltas
            elapsed = now - self.turn.first_delta_at
            if elapsed > 0.5 and now - self.turn.shown_at > 0.5:  # repaint the figure twice a second
                self.turn.shown_at = now
                self.main.status.tokens_per_s = self.turn.deltas / elapsed
        for item in items:
            await self.handle(item)

    async def handle(self, item: QueueItem) -> None:
        transcript, status = self.main.transcript, self.main.status
        if isinstance(item, TextDelta):
            status.prefill = None
            self.turn.said = (self.turn.said + item.text)[-SAID_KEPT:]
            await transcript.stream_text(item.text)
        elif isinstance(item, ReasoningDelta):
            status.prefill = None
            await transcript.stream_reasoning(item.text)
        elif isinstance(item, TurnStarted):
            self.turn = TurnStats()
            status.step = item.step
            # "thinking" only where the model reasons; otherwise it reads, then writes.
            thinking = self.workspace is not None and bool(self.workspace.reasoning_state())
            status.activity = "thinking" if thinking else "writing"
        elif isinstance(item, PrefillEvent):
            status.prefill = self.prefill_progress(item.done, item.total)
        elif isinstance(item, WritingProgress):
            status.prefill = None
            status.context_used = item.context
            if item.purpose == "summary":
                status.activity = f"compacting: summary {item.tokens} tokens"
        elif isinstance(item, MessageEvent):
            if item.message.role == "assistant":
                await transcript.end_turn()
                if not item.message.tool_calls:
                    self._last_answer = item.message.content.strip()
        elif isinstance(item, UsageEvent):
            status.prefill = None
            if item.decode_s > 0 and item.completion_tokens:
                status.tokens_per_s = item.completion_tokens / item.decode_s
            status.context_used = item.prompt_tokens + item.completion_tokens
            if self.workspace is not None:
                status.threads = self.workspace.model_info.threads  # revised from measured contention
        elif isinstance(item, ContextSample):
            status.context_used = item.used
        elif isinstance(item, ToolCallEvent):
            await transcript.add_tool_call(item.call)
            status.activity = f"running {item.call.name}"
        elif isinstance(item, ToolResultEvent):
            transcript.set_tool_result(item.tool_call_id, item.output, item.is_error)
            status.activity = "working"
        elif isinstance(item, ApprovalEvent):
            if item.decision == "rejected":
                transcript.set_tool_rejected(item.tool_call_id)
        elif isinstance(item, ExternalChangeEvent):
            self.external_paths.update(item.paths)
            status.external_changes = len(self.external_paths)
        elif isinstance(item, NoticeEvent):
            await transcript.add_notice(item.text, item.level)
        elif isinstance(item, ModeChanged):
            status.mode = item.mode
        elif isinstance(item, ContextEvent):
            status.context_allocated = item.to
        elif isinstance(item, CompactionEvent):
            status.context_used = item.after_tokens
            if item.trigger != "manual":  # /compact says it when it returns
                await transcript.add_notice(
                    f"compacted the conversation to fit the context: {item.before_tokens} → {item.after_tokens} tokens")
            if item.summary:
                await transcript.add_notice(f"the conversation goes on from this summary:\n{item.summary}")
        elif isinstance(item, SummaryEvent):
            await transcript.end_turn()
            if item.stop_reason == "finished":
                changed = ", ".join(item.files_changed) if item.files_changed else "none"
                await transcript.add_notice(f"done after {counted(item.steps, 'step')} · files changed: {changed}")
                if self.workspace is not None and self.workspace.mode == "plan" and self._last_answer:
                    self.finished_plan = self._last_answer
                    await transcript.add_notice(f"plan ready · Ctrl+G carries it out in ask mode ({PLAN_KEY_HINT})")
        elif isinstance(item, ApprovalRequested):
            await transcript.end_turn()
            self.ask(item.request, item.future)

    def prefill_progress(self, done: int, total: int) -> tuple[int, int, float | None] | None:
        if total <= 0 or done >= total:
            return None
        now = time.monotonic()
        if self.turn.prefill_started is None or done < self.turn.prefill_first_done:
            self.turn.prefill_started, self.turn.prefill_first_done = now, done
            return done, total, None
        elapsed = now - self.turn.prefill_started
        read = done - self.turn.prefill_first_done
        eta = (total - done) * elapsed / read if read > 0 and elapsed > 0 else None
        return done, total, eta

    def ask(self, request: ApprovalRequest, future: Future[ApprovalDecision]) -> None:
        if future.done():
            return  # answered already (Esc or quit while the request was in flight)

        def resolve(decision: ApprovalDecision | None) -> None:
            if not future.done():
                future.set_result(decision or ApprovalDecision(approved=False))
            self.main.status.activity = "working"

        self.main.status.activity = "waiting for you"
        if isinstance(request, EditApprovalRequest):
            self.push_screen(EditReviewScreen(request, said=self.turn.said), callback=resolve)
        elif isinstance(request, BashApprovalRequest):
            self.push_screen(BashApprovalScreen(request), callback=resolve)
        else:  # a kind this UI cannot show: answer, so the agent thread never waits forever
            resolve(ApprovalDecision(approved=False, reason=f"ribbit's TUI cannot review a {request.kind} request"))

    # -- control --------------------------------------------------------------------------------

    def action_stop(self) -> None:
        """Esc: stop the current generation or tool; the session can go on with a new message."""
        if not self.busy or self.workspace is None:
            return
        self.workspace.cancel()
        self.approver.reject_pending("the user stopped the agent")
        self.main.status.activity = "stopping…"

    def action_ctrl_c(self) -> None:
        """Ctrl+C stops a turn as Esc does (every terminal program's reflex); twice within the window quits."""
        now = time.monotonic()
        if now - self._last_ctrl_c <= CTRL_C_WINDOW_S:
            self.action_quit_app()
            return
        self._last_ctrl_c = now
        if self.busy and self.workspace is not None:
            self.action_stop()
            self.notify("Stopping the agent; press Ctrl+C again to quit", timeout=CTRL_C_WINDOW_S)
            return
        self.notify("Press Ctrl+C again to quit", timeout=CTRL_C_WINDOW_S)

    def action_quit_app(self) -> None:
        self.shutdown_agent()
        self.exit(0)

    # -- slash commands -------------------------------------------------------------------------

    async def run_command(self, text: str) -> None:
        await commands.run_command(self, text)

    def refresh_custom_commands(self) -> None:
        """Read the user's own commands again (cheap: two small folders) and hand the list to the prompt."""
        if self.workspace is None:
            return
        found, problems = self.workspace.custom_commands()
        self.custom_commands = found
        prompt = self.main.prompt
        prompt.commands = commands.command_list(found)
        new = [p for p in problems if p not in self._told_problems]
        self._told_problems.update(new)
        for line in new:
            self.call_later(self._notice, visible(line, one_line=True), "warning")

    def retry_model(self, spec: str) -> None:
        """`/model SPEC` after the model failed to load: open the session again with that one."""
        self.setup_error, self.model_failed, self.config.model = None, False, spec
        self.main.prompt.placeholder = PROMPT_PLACEHOLDER
        self.main.status.model_name = "loading model…"
        self.open_session()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "carry_out_plan":  # otherwise the key goes on to the focused widget
            return self.finished_plan is not None and not self.busy and self.workspace is not None
        return True

    async def action_carry_out_plan(self) -> None:
        """Ctrl+G on a finished plan: leave plan mode for ask (every edit still shown first) and send it."""
        plan, workspace = self.finished_plan, self.workspace
        if plan is None or workspace is None or self.busy:
            return
        self.finished_plan = None
        self.main.status.mode = workspace.set_mode("ask")
        await self.main.transcript.add_notice("mode is now ask")
        task = CARRY_OUT_PLAN + plan
        await self.main.transcript.add_user(task)
        self.start_task(task, mentions=False)

    def describe_model(self) -> str:
        if self.model is None:
            return "the model is still loading"
        info = self.model.info
        parts = [info.name]
        if info.quantization:
            parts.append(info.quantization)
        if info.path:
            parts.append(info.path)
        grows = info.context_allocated is not None and info.context_allocated < info.context_length
        parts.append(f"context {info.context_allocated} (grows to {info.context_length})" if grows else f"context {info.context_length}")
        return "model: " + " · ".join(parts) + f". /model SPEC switches ({spec_forms()})."

    @work(thread=True, exclusive=True, group="setup")
    def load_other_model(self, spec: str) -> None:
        try:
            model = load_model(spec, context=self.config.context, engine=self.config.engine)
        except (ModelError, OSError) as exc:
            self.post_message(ModelLoaded(spec, error=str(exc)))
            return
        self.post_message(ModelLoaded(spec, model=model))

    async def on_model_loaded(self, message: ModelLoaded) -> None:
        """Switch the session to the loaded model; the conversation goes on from where it is."""
        self.main.status.activity = ""
        transcript = self.main.transcript
        if message.model is None or self.workspace is None:
            await transcript.add_notice(f"/model: {message.error or 'the session is not open'}", "error")
            return
        if self.busy:  # a task started while it loaded: keep the model the task runs on
            message.model.close()
            await transcript.add_notice("/model: the agent started working; switch again when it stops", "warning")
            return
        if self.preloading:
            message.model.close()  # the old model is still reading the system prompt
            await transcript.add_notice("/model: the conversation is still being read; switch again in a moment", "warning")
            return
        old, self.model = self.model, message.model
        self.workspace.use_model(message.model)
        self.bridge.context_used = message.model.context_used
        self.show_model(self.workspace)
        if old is not None and old is not message.model:
            old.close()
        await transcript.add_notice(self.describe_model())
        self.preload()  # the new model reads the conversation so far (the system prompt at least) while the user types

    @work(thread=True, exclusive=True, group="undo")
    def undo(self, uncertain_too: bool = False) -> None:
        assert self.workspace is not None
        try:
            result = self.workspace.undo_last(uncertain_too)
        except JournalError as exc:
            self.call_from_thread(self._notice, f"undo: {exc}", "error")
            return
        self.call_from_thread(self._notice, result.summary())

    async def _notice(self, text: str, level: str = "info") -> None:
        """A worker's one line for the transcript, looked up on the UI thread (the screen may be gone)."""
        with suppress(NoMatches):
            await self.main.transcript.add_notice(text, level)

    @work(thread=True, exclusive=True, group="agent")
    def compact(self, focus: str) -> None:
        """`/compact [focus]`: the model summarises the conversation, which goes on from the summary."""
        assert self.workspace is not None
        after: int | None = None
        try:
            event = self.workspace.compact(focus)
            text = f"compacted: {event.before_tokens} → {event.after_tokens} tokens; the conversation goes on from the summary"
            level, after = "info", event.after_tokens
        except ModelError as exc:
            text, level = f"compact: {exc}", "error"
        except Exception as exc:  # a bug: one line, the app goes on
            text, level = f"compact failed: {type(exc).__name__}: {exc}", "error"
        self.call_from_thread(self._compacted, text, level, after)

    async def _compacted(self, text: str, level: str, after: int | None = None) -> None:
        await self.drain()
        self.busy = False
        self.main.status.activity = ""
        # The gauge shows what the next turn reads (the summary), as the notice says, not the model's cache,
        # which still holds the conversation it summarised.
        if after is not None:
            self.main.status.context_used = after
        await self.main.transcript.add_notice(text, level)

    def rewind_chosen(self, choice: RewindChoice | None) -> None:
        if choice is not None:
            self.rewind(choice)

    @work(thread=True, exclusive=True, group="undo")
    def rewind(self, choice: RewindChoice) -> None:
        """Back to before an earlier prompt (files, conversation or both); refusals are one line."""
        assert self.workspace is not None
        index = self.rewind_from + choice.index  # the list started at the last /clear
        prompt = self.workspace.prompts()[index]
        try:
            text = self.workspace.rewind(index, files=choice.files, conversation=choice.conversation)
        except (JournalError, SessionError) as exc:
            self.call_from_thread(self._notice, f"rewind: {exc}", "error")
            return
        self.call_from_thread(self._rewound, text, prompt if choice.conversation else None)

    async def _rewound(self, text: str, prompt: str | None) -> None:
        transcript = self.main.transcript
        if prompt is not None:  # the conversation went back: show it as it is now, the prompt ready to edit
            await transcript.clear()
            await self.show_conversation()
            self.main.prompt.text = prompt
        self.main.status.context_used = self.workspace.context_used() if self.workspace else 0
        await transcript.add_notice(f"rewound: {text}")

    @work(thread=True, exclusive=True, group="diff")
    def show_session_diff(self) -> None:
        """`/diff`: the session's changes (git runs here, off the UI thread), then the screen."""
        assert self.workspace is not None
        changes = self.workspace.session_diff()
        self.call_from_thread(self.push_screen, SessionDiffScreen(changes), self._diff_closed)

    def _diff_closed(self, typed: str | None) -> None:
        """Keys typed while /diff was open go on in the prompt, where they were meant."""
        if typed:
            prompt = self.main.prompt
            prompt.insert(typed)
            prompt.focus()


def reasoning_label(workspace: Workspace) -> str:
    """The status bar's reasoning field: on / off, or empty when the model has no switch."""
    state = workspace.reasoning_state()
    return "" if state is None else ("on" if state else "off")


def make_app(
    repo: str | Path = ".",
    model: str | ChatModel | None = None,
    *,
    mode: str = "ask",
    context: int = 131_072,
    no_sandbox: bool = False,
    limits: Limits | None = None,
    reasoning: bool | None = None,
    continue_last: bool = False,
    resume: str | None = None,
    intro: str | None = None,
    task: str | None = None,
    engine: EngineOptions | None = None,
) -> RibbitApp:
    """The one way to build the app: used by `ribbit` (tui_main), `ribbit tour` and by the tests."""
    return RibbitApp(
        AppConfig(repo=Path(repo), model=model, mode=mode, context=context, no_sandbox=no_sandbox, limits=limits,
                  reasoning=reasoning, continue_last=continue_last, resume=resume, intro=intro, task=task,
                  engine=engine or EngineOptions())
    )


def run_app(app: RibbitApp) -> int:
    """The screen until the user quits (`ribbit`, `ribbit tour`); then the exit code (0 for none)."""
    try:
        code = app.run()
    finally:
        # Quitting stops the agent (cancel + reject open questions); let it finish its current
        # atomic write so nothing is left half done.
        app.shutdown_agent()
        app.join_agent()
        app.close_workspace()
    return code or 0
