"""One editor session: a Workspace (agent.session) driven from the connection's event loop.

Threads: the agent runs in a worker thread (as in the TUI). Its events become session updates written
right there, on the thread that emits them (the workspace already serialises its emitters), as `ribbit run`
prints its progress: no hop through the event loop per token, whose wake-ups cost a scheduler slice each on
a loaded 2-core machine. Before the editor knows the session's id, updates wait in a backlog. A question
goes to the loop, which asks the editor and hands the answer to the waiting agent thread through a Future
(as the TUI's approver does); the tool call it is about was written before it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from acp import helpers
from acp.exceptions import RequestError
from acp.interfaces import Client
from acp.meta import CLIENT_METHODS
from acp.schema import (
    PermissionOption,
    PromptResponse,
    SessionNotification,
    StopReason,
    TextContentBlock,
    ToolCallUpdate,
)
from acp.utils import serialize_params

from agent.session import (
    AgentEvent,
    ApprovalDecision,
    ApprovalRequest,
    BashApprovalRequest,
    CustomCommand,
    JournalError,
    ModeError,
    SessionError,
    Workspace,
)
from app.approver import FutureApprover
from app.acp.commands import COMMANDS, available_commands, parse_command
from app.acp.permissions import ALLOW_ONCE, REJECT, decision_from, permission_request
from app.acp.prompt import PromptError, prompt_text
from app.acp.updates import CallTracker, fenced, notice_text, text_chunk, updates_for
from models.base import ModelError

T = TypeVar("T")

STOP_REASONS: dict[str, StopReason] = {
    "finished": "end_turn", "error": "end_turn", "interrupted": "cancelled", "max_steps": "max_turn_requests",
    "turn_tokens": "max_tokens", "context": "max_tokens",
}
FOLDER_CALL = "ribbit-folder"


class ModelTurns:
    """What every session of the process shares: the model, one turn (or preload) on it at a time, and the
    worker threads the agent runs in."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.executor = ThreadPoolExecutor(max_workers=16, thread_name_prefix="ribbit-agent")

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        return self.executor.submit(fn)

    async def run(self, fn: Callable[[], T]) -> T:
        """`fn` in a worker thread (blocking work: git, files, the model)."""
        return await asyncio.wrap_future(self.submit(fn))

    def holding_model(self, fn: Callable[[], T], cancelled: threading.Event) -> T | None:
        """Run `fn` while no other session uses the model; None when cancelled while waiting (worker thread)."""
        while not self.lock.acquire(timeout=0.1):
            if cancelled.is_set():
                return None
        try:
            if cancelled.is_set():
                return None
            return fn()
        finally:
            self.lock.release()


class EditorApprover(FutureApprover):
    """The agent's Approver: each question becomes a session/request_permission; the agent thread waits."""

    def __init__(self, session: AcpSession) -> None:
        super().__init__()
        self.session = session

    def send(self, request: ApprovalRequest, future: Future[ApprovalDecision]) -> bool:
        try:
            self.session.loop.call_soon_threadsafe(self.session.ask, request, future)
        except RuntimeError:  # the loop is gone
            return False
        return True


Notify = Callable[[dict[str, Any]], None]


def notification(session_id: str, update: Any) -> dict[str, Any]:
    """A session/update notification as the SDK would send it."""
    params = serialize_params(SessionNotification(session_id=session_id, update=update))
    return {"jsonrpc": "2.0", "method": CLIENT_METHODS["session_update"], "params": params}


class AcpSession:
    def __init__(self, client: Client, notify: Notify, loop: asyncio.AbstractEventLoop, turns: ModelTurns, root: Path) -> None:
        self.client = client
        self.notify = notify
        self.loop = loop
        self.turns = turns
        self.root = root
        self.id = ""
        self.workspace: Workspace | None = None
        self.approver = EditorApprover(self)
        self.calls = CallTracker(root)
        self._lock = threading.RLock()  # one writer at a time, in order: the agent, the watcher, the loop
        self._backlog: list[Any] = []  # updates from before the editor knew the session's id
        self.live = False
        self.cancelled = threading.Event()
        self.busy = False
        self.confirm_folder: str | None = None  # outside git: asked before the first prompt runs
        self.custom: dict[str, CustomCommand] = {}  # the user's own slash commands (agent.session.commands)
        self._asks: set[asyncio.Task[None]] = set()

    # -- events, from any thread ----------------------------------------------------------------

    def sink(self, event: AgentEvent) -> None:
        with self._lock:
            if not self.live:
                self._backlog.append(event)
                return
            self._send(self.updates(event))

    def push(self, update: Any) -> None:
        """An ACP update of the front end's own (commands, history, a command's answer)."""
        with self._lock:
            if not self.live:
                self._backlog.append(update)
                return
            self._send([update])

    def _send(self, updates: list[Any]) -> None:
        for update in updates:
            try:
                self.notify(notification(self.id, update))
            except ConnectionError:
                return  # the editor went away: the shutdown follows
            except Exception:  # one update that cannot be sent must not silence the rest
                logging.exception("session %s: an update could not be sent", self.id)

    def attach(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.id = workspace.journal.session_id

    def start(self, now: bool = False) -> None:
        """Send the backlog and go live: at once (`now`: the reply that follows needs them first, session/load),
        or on the loop's next turn, after the reply that tells the editor the session's id (session/new)."""
        described = {name: command.description for name, command in self.custom.items()}
        self.push(helpers.update_available_commands(available_commands(described)))
        if now:
            self._go_live()
        else:
            self.loop.call_soon(self._go_live)

    def _go_live(self) -> None:
        with self._lock:
            self.live = True
            backlog, self._backlog = self._backlog, []
            for item in backlog:
                self._send([item] if hasattr(item, "session_update") else self.updates(item))

    def updates(self, event: AgentEvent) -> list[Any]:
        workspace = self.workspace
        size = 0
        if workspace is not None:
            size = min(workspace.limits.context, workspace.model_info.context_length or workspace.limits.context)
        return updates_for(event, self.calls, size)

    def say(self, text: str) -> None:
        self.push(text_chunk(text))

    # -- questions ------------------------------------------------------------------------------

    def ask(self, request: ApprovalRequest, future: Future[ApprovalDecision]) -> None:
        """On the loop: ask the editor about `request`; the answer resolves `future`."""
        task = self.loop.create_task(self._ask(request, future))
        self._asks.add(task)
        task.add_done_callback(self._asks.discard)

    async def _ask(self, request: ApprovalRequest, future: Future[ApprovalDecision]) -> None:
        try:
            call, options = permission_request(self.root, request)
            response = await self.client.request_permission(session_id=self.id, tool_call=call, options=options)
            decision = decision_from(response, command=isinstance(request, BashApprovalRequest))
        except asyncio.CancelledError:
            decision = ApprovalDecision(approved=False, reason="the user stopped the agent")
        except Exception as exc:  # the editor failed to answer, or answered nonsense: no
            decision = ApprovalDecision(approved=False, reason=f"the editor did not answer ({type(exc).__name__})")
        if not future.done():
            future.set_result(decision)

    async def ask_folder(self) -> bool:
        """Outside git, before the first prompt: work in this folder? (The TUI asks the same.)"""
        text = self.confirm_folder or ""
        title = f"Work in {self.root}?"
        self.push(helpers.start_tool_call(
            FOLDER_CALL, title, kind="other", status="pending", content=[helpers.tool_content(helpers.text_block(text))]))
        options = [PermissionOption(option_id=ALLOW_ONCE, name="Work here", kind="allow_once"),
                   PermissionOption(option_id=REJECT, name="Don't", kind="reject_once")]
        try:
            response = await self.client.request_permission(
                session_id=self.id, tool_call=ToolCallUpdate(tool_call_id=FOLDER_CALL, title=title, status="pending"),
                options=options)
            yes = decision_from(response, command=False).approved
        except Exception:
            yes = False
        self.push(helpers.update_tool_call(FOLDER_CALL, status="completed" if yes else "failed"))
        if yes:
            self.confirm_folder = None
        return yes

    # -- turns ----------------------------------------------------------------------------------

    def cancel(self) -> None:
        """session/cancel (on the loop): stop the model or the running command (as Esc), answer open questions no."""
        self.stop()
        for task in list(self._asks):
            task.cancel()

    def stop(self) -> None:
        """The thread-safe part of a cancel: the agent stops, the questions it waits on are answered no."""
        self.cancelled.set()
        if self.workspace is not None:
            self.workspace.cancel()
        self.approver.reject_pending("the user stopped the agent")

    async def prompt(self, blocks: list[Any]) -> PromptResponse:
        workspace = self.workspace
        assert workspace is not None
        if self.busy:
            raise RequestError(-32600, f"a prompt is already running in session {self.id}; send session/cancel first")
        self.busy = True
        self.cancelled.clear()
        try:
            only = blocks[0] if len(blocks) == 1 else None
            command = parse_command(only.text, self.custom) if isinstance(only, TextContentBlock) else None
            if command is not None and command[0] in COMMANDS and command[0] != "init":
                self.say(await self.command(*command))
                return PromptResponse(stop_reason="end_turn")
            if command is not None and command[0] == "init":
                task = workspace.INIT_TASK
            elif command is not None:  # one of the user's own: its prompt, in its mode if it names one
                custom = self.custom[command[0]]
                task = custom.expand(command[1])
                if custom.mode and custom.mode != workspace.mode:
                    try:
                        workspace.set_mode(custom.mode)
                    except ModeError as exc:
                        raise RequestError(-32602, f"/{custom.name}: {exc}") from None
            else:
                try:
                    if all(isinstance(b, TextContentBlock) for b in blocks):  # nothing to read: no thread hop
                        task = prompt_text(blocks, self.root, workspace)
                    else:
                        task = await self.turns.run(lambda: prompt_text(blocks, self.root, workspace))
                except PromptError as exc:
                    raise RequestError(-32602, str(exc)) from None
            if self.confirm_folder is not None and not await self.ask_folder():
                self.say(notice_text("info", f"not sent: ribbit works only where you agree to ({self.root})"))
                return PromptResponse(stop_reason="refusal")
            summary = await self.turns.run(lambda: self.turns.holding_model(lambda: workspace.run(task), self.cancelled))
            if self.cancelled.is_set() or summary is None:
                return PromptResponse(stop_reason="cancelled")
            return PromptResponse(stop_reason=STOP_REASONS.get(summary.stop_reason, "end_turn"))
        finally:
            self.busy = False

    def preload(self) -> None:
        """Read the system prompt now, while the user types (as the TUI does); in a worker, one at a time."""
        workspace = self.workspace
        if workspace is not None:
            self.turns.submit(lambda: self.turns.holding_model(workspace.preload, self.cancelled))

    async def command(self, name: str, arg: str) -> str:
        """A slash command's one message for the editor."""
        workspace = self.workspace
        assert workspace is not None and name in COMMANDS
        try:
            if name == "undo":
                return (await self.turns.run(workspace.undo_last)).summary()
            if name == "diff":
                changes = await self.turns.run(workspace.session_diff)
                if not changes:
                    return "no changes in this session"
                return "\n\n".join(f"{path}\n\n{fenced(diff, 'diff')}" for path, diff in changes)
            if name == "rewind":
                return await self.rewind(arg)
            if name == "compact":
                event = await self.turns.run(lambda: self.turns.holding_model(lambda: workspace.compact(arg), self.cancelled))
                if event is None:
                    return "compact: stopped"
                return f"compacted: {event.before_tokens} → {event.after_tokens} tokens; the conversation goes on from the summary"
            if name == "clear":
                workspace.clear()
                self.preload()
                return "a new conversation: the model remembers nothing of the earlier prompts (the files stay as they are)"
            if name == "allowed":
                return self.allowed(arg)
        except (JournalError, SessionError, ModelError, OSError) as exc:
            return f"{name}: {exc}"
        return f"{name}: not available"

    async def rewind(self, arg: str) -> str:
        workspace = self.workspace
        assert workspace is not None
        prompts = workspace.prompts()
        if not prompts:
            return "nothing to rewind: no prompt in this session yet"
        if not arg:
            listed = "\n".join(f"{n:>3}. {' '.join(p.split())[:80]}" for n, p in enumerate(prompts, start=1))
            return "back to before which prompt? /rewind N (files and conversation):\n\n" + fenced(listed)
        if not arg.isdigit() or not 1 <= int(arg) <= len(prompts):
            return f"rewind: choose a number from 1 to {len(prompts)}"
        index = int(arg) - 1
        done = await self.turns.run(lambda: self.turns.holding_model(lambda: workspace.rewind(index), self.cancelled))
        return f"rewound: {done}" if done is not None else "rewind: stopped"

    def allowed(self, arg: str) -> str:
        workspace = self.workspace
        assert workspace is not None
        prefixes = workspace.allowed_prefixes()
        verb, _, target = arg.partition(" ")
        if not verb:
            if not prefixes:
                return "no command prefixes allowed in this project (“always allow” on a command adds one)"
            return "run here without asking, read-only (/allowed revoke N forgets one):\n\n" + fenced(
                "\n".join(f"{n:>3}. {p}" for n, p in enumerate(prefixes, start=1)))
        target = target.strip()
        if verb != "revoke" or not target:
            return "/allowed lists; /allowed revoke N (or the prefix) forgets one"
        if target.isdigit() and 1 <= int(target) <= len(prefixes):
            target = prefixes[int(target) - 1]
        if workspace.revoke_prefix(target):
            return f"revoked: commands starting {target!r} ask again"
        return f"{target!r} is not among the allowed prefixes"

    def close(self) -> None:
        """Shut down (any thread): stop the agent, answer open questions no (its threads are waited for elsewhere)."""
        self.stop()
        self.approver.close()
