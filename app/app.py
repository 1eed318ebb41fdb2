"""The ribbit TUI: `make_app(...)` builds it for `tui_main` and for the tests (posting style).

Threads: the model is loaded and the agent runs in thread workers. The agent never touches a
widget: it calls `EventBridge.sink` and `TuiApprover.decide` (toad style), which only queue and
post one coalescing `EventsReady` ping; the app drains the queue on its own thread and moves
attributes down into the widgets. An approval carries a Future that a review screen resolves.
"""

from __future__ import annotations

import gc
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from textual import events, work
from textual.app import App
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.message import Message
from textual.worker import Worker, WorkerState

from agent.session import ApprovalDecision, ApprovalRequest, BashApprovalRequest, EditApprovalRequest
from agent.session import (
    AgentEvent,
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
from agent.session import JournalError
from agent.session import Limits
from agent.session import SavedSession, SessionError, SessionStore
from agent.session import ModeError, SetupError, Workspace, open_workspace, outside_git
from app.messages import (
    ApprovalRequested, EventsReady, ModelLoaded, PromptSubmitted, RunFinished, SetupFailed, WorkspaceReady,
)
from app.screens.bash import BashApprovalScreen
from app.screens.confirm import ConfirmScreen
from app.screens.main import PROMPT_PLACEHOLDER, MainScreen
from app.screens.pacing import PacedScreen
from app.screens.review import EditReviewScreen
from app.screens.session_diff import SessionDiffScreen
from app.screens.sessions import RewindChoice, RewindScreen, SessionPickerScreen
from app.visible import visible
from app.widgets.prompt import MODE_ARGS, SLASH_COMMANDS
from models.base import ChatModel, ModelError
from models.embedded import DEMO_LIMITS, EMBEDDED_NAME, WORKING_MODELS, is_embedded
from models.backends import DEFAULT_SPECS, EngineOptions, load_model, resolve_spec, spec_forms

FIRST_RUN_HINT = f"Running {EMBEDDED_NAME}, {DEMO_LIMITS}. {WORKING_MODELS[0].upper()}{WORKING_MODELS[1:]}."
MODEL_FAILED_HINT = ("type /model SPEC to load another (a GGUF path, default, openai:http://HOST:PORT/v1#MODEL), "
                     "or quit (Ctrl+C twice) and start ribbit with --model SPEC")
HELP_TEXT = "\n".join(
    ["Keys: Enter send · Shift+Enter/Ctrl+J newline · Up/Down history · Tab complete /command · "
     "Esc stop the model or tool · Ctrl+C twice quit",
     "Review: y approve · n reject (type a reason) · space toggle hunk · j/k move · a approve all (auto-edit) · "
     "s split/unified",
     "Bash: y run · n don't · p run it, and from now on its program and subcommand here without asking "
     "(read-only; /allowed lists and revokes)"]
    + [f"{name:<7} {text}" for name, text in SLASH_COMMANDS.items()]
)
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


# -- the agent-thread boundary -------------------------------------------------------------------


@dataclass(frozen=True)
class ContextSample:
    """Tokens in the model's context, read on the agent thread right after a turn."""

    used: int


QueueItem = AgentEvent | ApprovalRequested | ContextSample


def coalesce(items: list[QueueItem]) -> list[QueueItem]:
    """Merge runs of text (and of reasoning) deltas: one repaint per drain, not per token."""
    out: list[QueueItem] = []
    for item in items:
        last = out[-1] if out else None
        if isinstance(item, TextDelta) and isinstance(last, TextDelta):
            out[-1] = TextDelta(text=last.text + item.text)
        elif isinstance(item, ReasoningDelta) and isinstance(last, ReasoningDelta):
            out[-1] = ReasoningDelta(text=last.text + item.text)
        else:
            out.append(item)
    return out


class EventBridge:
    """The agent's EventSink: an ordered queue plus one coalescing ping (any thread)."""

    def __init__(self, post: Callable[[Message], object]) -> None:
        self._post = post
        self._queue: deque[QueueItem] = deque()
        self._lock = threading.Lock()
        self._deltas = 0
        self._ping_pending = False
        self.context_used: Callable[[], int] | None = None

    def sink(self, event: AgentEvent) -> None:
        items: list[QueueItem] = [event]
        if isinstance(event, UsageEvent) and self.context_used is not None:
            try:
                items.append(ContextSample(self.context_used()))
            except Exception:  # a backend that cannot say: the status bar keeps its last figure
                pass
        self._push(items, deltas=isinstance(event, (TextDelta, ReasoningDelta)))

    def push_approval(self, message: ApprovalRequested) -> None:
        self._push([message])

    def _push(self, items: list[QueueItem], deltas: bool = False) -> None:
        with self._lock:
            self._queue.extend(items)
            self._deltas += deltas
            if self._ping_pending:
                return  # the app has not drained yet; it will see these too
            self._ping_pending = True
        self._post(EventsReady())

    def drain(self) -> tuple[list[QueueItem], int]:
        """Everything queued so far, in order and coalesced, and how many raw deltas it held."""
        with self._lock:
            items = list(self._queue)
            self._queue.clear()
            deltas, self._deltas = self._deltas, 0
            self._ping_pending = False
        return coalesce(items), deltas


class TuiApprover:
    """The agent's Approver: post the request with a Future, block until the UI resolves it."""

    def __init__(self, bridge: EventBridge) -> None:
        self.bridge = bridge
        self._pending: set[Future[ApprovalDecision]] = set()
        self._lock = threading.Lock()
        self._closed = False

    def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        future: Future[ApprovalDecision] = Future()
        with self._lock:
            if self._closed:
                return ApprovalDecision(approved=False, reason="ribbit is shutting down")
            self._pending.add(future)
        self.bridge.push_approval(ApprovalRequested(request=request, future=future))
        try:
            return future.result()
        finally:
            with self._lock:
                self._pending.discard(future)

    def reject_pending(self, reason: str) -> None:
        """Answer no to every open question (Esc, quit), so the agent thread moves on at once."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            if not future.done():
                future.set_result(ApprovalDecision(approved=False, reason=reason))

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.reject_pending("ribbit is shutting down")


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


@dataclass
class TurnStats:
    """View state for the status bar's live figures during one turn."""

    prefill_started: float | None = None
    prefill_first_done: int = 0
    first_delta_at: float | None = None
    deltas: int = 0
    shown_at: float = 0.0


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
        self.collector.start()
        self.set_interval(1.0, lambda: self.collector.tick(self.last_key_at), name="quiet gc")
        self.call_after_refresh(self._start)

    async def _start(self) -> None:
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
                raise SetupError("review mode is not available in the TUI yet; use `ribbit run --mode review TASK`")
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
        for message in self.workspace.conversation():
            if message.role == "user":
                await transcript.add_user(message.content)
            elif message.role == "assistant" and message.content.strip():
                await transcript.stream_text(message.content)
                await transcript.end_turn()
            elif message.role == "assistant" and message.tool_calls:
                for call in message.tool_calls:
                    await transcript.add_tool_call(call)
            elif message.role == "tool" and message.tool_call_id:
                transcript.set_tool_result(message.tool_call_id, message.content, message.content.startswith("Error:"))


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

    def start_task(self, task: str) -> None:
        self.finished_plan = None
        self._last_answer = ""
        self.busy = True
        self.main.status.activity = "working"
        self.run_agent(task)

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
    def run_agent(self, task: str) -> None:
        assert self.workspace is not None
        self._agent_thread = threading.current_thread()
        try:
            self.workspace.run(task)
        except Exception as exc:  # a bug, not an observation: show it, keep the app alive
            self.post_message(RunFinished(error=f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(RunFinished())

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
                await transcript.add_notice(f"done after {item.steps} steps · files changed: {changed}")
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
            self.push_screen(EditReviewScreen(request), callback=resolve)
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
        now = time.monotonic()
        if now - self._last_ctrl_c <= CTRL_C_WINDOW_S:
            self.action_quit_app()
            return
        self._last_ctrl_c = now
        self.notify("Press Ctrl+C again to quit", timeout=CTRL_C_WINDOW_S)

    def action_quit_app(self) -> None:
        self.shutdown_agent()
        self.exit(0)

    # -- slash commands -------------------------------------------------------------------------

    async def run_command(self, text: str) -> None:
        transcript = self.main.transcript
        command, _, arg = text.strip().partition(" ")
        arg = arg.strip()
        if command == "/quit":
            self.action_quit_app()
        elif command == "/help":
            await transcript.add_notice(HELP_TEXT)
        elif command == "/model" and not arg:
            await transcript.add_notice(self.describe_model())
        elif command == "/model" and self.workspace is None and self.model_failed:
            self.setup_error, self.model_failed, self.config.model = None, False, arg
            self.main.prompt.placeholder = PROMPT_PLACEHOLDER
            self.main.status.model_name = "loading model…"
            await transcript.add_notice(f"loading {arg}…")
            self.open_session()
        elif command not in SLASH_COMMANDS:
            await transcript.add_notice(f"unknown command {command}; /help lists them", "error")
        elif self.workspace is None:
            await transcript.add_notice(f"no session: {self.setup_error}" if self.setup_error else
                                        "the session is not open yet", "warning")
        elif command == "/allowed":
            await self.allowed(arg)
        elif command == "/mode":
            await self.set_mode(arg)
        elif command == "/think":
            await self.set_reasoning(arg)
        elif self.busy:
            await transcript.add_notice(f"{command} waits until the agent stops; press Esc to stop it", "warning")
        elif command == "/model":
            await transcript.add_notice(f"loading {arg}…")
            self.main.status.activity = "loading model"
            self.load_other_model(arg)
        elif command == "/diff":
            self.show_session_diff()
        elif command == "/undo":
            self.undo()
        elif command == "/compact":
            self.busy = True
            self.main.status.activity = "compacting"
            self.compact(arg)
        elif command == "/rewind":
            prompts = self.workspace.prompts()[self.rewind_from:]
            if not prompts:
                await transcript.add_notice("nothing to rewind: no prompt in this conversation yet", "warning")
            else:
                self.push_screen(RewindScreen(prompts), callback=self._rewind_chosen)
        elif command == "/init":
            await transcript.add_user("/init")
            await transcript.add_notice("asking the model to draft AGENTS.md; its Write is shown as a diff like any other")
            self.start_task(Workspace.INIT_TASK)
        elif command == "/clear":
            await transcript.clear()
            self.workspace.clear()  # keeps the system prompt; the next task starts a new conversation
            # /rewind goes back within this conversation only; the gauge shows what the next turn reads.
            self.rewind_from = len(self.workspace.prompts())
            self.main.status.context_used = self.workspace.prompt_tokens()
            self.preload()  # back to just the system prompt, read (or restored) before the next task
            self.main.status.step = 0

    async def allowed(self, arg: str) -> None:
        """`/allowed`: the command prefixes allowed here; `/allowed revoke N|PREFIX` forgets one."""
        assert self.workspace is not None
        transcript, prefixes = self.main.transcript, self.workspace.allowed_prefixes()
        verb, _, target = arg.partition(" ")
        if not verb:
            if not prefixes:
                await transcript.add_notice("no command prefixes allowed in this project ('p' in a Bash question adds one)")
                return
            listed = "\n".join(f"{n:>3}. {visible(p, one_line=True)}" for n, p in enumerate(prefixes, start=1))
            await transcript.add_notice("run here without asking, read-only (/allowed revoke N forgets one):\n" + listed)
            return
        target = target.strip()
        if verb != "revoke" or not target:
            await transcript.add_notice("/allowed lists; /allowed revoke N (or the prefix) forgets one", "error")
            return
        if target.isdigit() and 1 <= int(target) <= len(prefixes):
            target = prefixes[int(target) - 1]
        try:
            removed = self.workspace.revoke_prefix(target)
        except OSError as exc:
            await transcript.add_notice(f"/allowed: cannot save the list: {exc.strerror or exc}", "error")
            return
        if removed:
            await transcript.add_notice(f"revoked: commands starting {visible(target, one_line=True)!r} ask again")
        else:
            await transcript.add_notice(f"{visible(target, one_line=True)!r} is not among the allowed prefixes", "error")

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
        self.start_task(task)

    async def set_mode(self, mode: str) -> None:
        assert self.workspace is not None
        transcript, workspace = self.main.transcript, self.workspace
        if not mode:
            await transcript.add_notice(f"mode is {workspace.mode}; choose one of: {', '.join(MODE_ARGS)}")
            return
        try:
            self.main.status.mode = workspace.set_mode(mode)
        except ModeError as exc:
            choose = "" if mode in MODE_ARGS else f"; choose one of: {', '.join(MODE_ARGS)}"
            await transcript.add_notice(f"{exc}{choose}", "error")
            return
        await transcript.add_notice(f"mode is now {mode}")

    async def set_reasoning(self, arg: str) -> None:
        """`/think on|off`: applies from the next turn (the running task's too); nothing is read again."""
        assert self.workspace is not None
        transcript, workspace = self.main.transcript, self.workspace
        info = workspace.model_info
        no_switch = workspace.no_reasoning_switch()
        if not arg:
            state = workspace.reasoning_state()
            if info.reasoning is None:
                await transcript.add_notice(no_switch)
            elif state is None:
                await transcript.add_notice("reasoning is as the server's default; /think on|off asks the server to switch it")
            else:
                await transcript.add_notice(f"reasoning is {'on' if state else 'off'}; /think on|off switches it")
            return
        if arg not in ("on", "off"):
            await transcript.add_notice(f"/think takes on or off, not {arg!r}", "error")
            return
        if not workspace.set_reasoning(arg == "on"):
            await transcript.add_notice(no_switch + f"; /think {arg} applies to a model you switch to with /model", "warning")
            return
        self.main.status.reasoning = reasoning_label(workspace)
        await transcript.add_notice(f"reasoning {arg} from the next turn (the conversation so far is not read again)")

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
    def undo(self) -> None:
        assert self.workspace is not None
        try:
            result = self.workspace.undo_last()
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

    def _rewind_chosen(self, choice: RewindChoice | None) -> None:
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
    engine: EngineOptions | None = None,
) -> RibbitApp:
    """The one way to build the app: used by `ribbit` (tui_main) and by the tests."""
    return RibbitApp(
        AppConfig(repo=Path(repo), model=model, mode=mode, context=context, no_sandbox=no_sandbox, limits=limits,
                  reasoning=reasoning, continue_last=continue_last, resume=resume, engine=engine or EngineOptions())
    )
