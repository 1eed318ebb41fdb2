"""The ACP Agent: what an editor calls. Sessions are ribbit sessions (saved, resumable with session/load,
undoable with `ribbit undo`), opened with the same refusals as the TUI; the model is loaded once for the
process and shared, one turn at a time."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION
from acp.exceptions import RequestError
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    SessionCapabilities,
    SessionInfo,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SetSessionModeResponse,
)

from agent.session import (
    JournalError,
    Limits,
    ModeError,
    SavedSession,
    SessionError,
    SessionStore,
    SetupError,
    check_repo,
    check_state,
    load_commands,
    open_workspace,
    outside_git,
)
from app.acp.session import AcpSession, ModelTurns, Notify
from app.acp.updates import history_updates
from app.visible import visible
from models.base import ChatModel, ModelError

MODES: dict[str, str] = {
    "ask": "each change is shown as a diff and waits for you; commands ask unless allowed",
    "auto-edit": "changes are applied at once (journaled, undoable); commands ask unless allowed",
    "full-auto": "changes applied and commands run in the sandbox without asking",
    "plan": "explores and ends with a plan; nothing may change",
}
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


def refusal(message: str, code: int = INVALID_PARAMS) -> RequestError:
    """A protocol error whose message is the one line a user reads."""
    return RequestError(code, visible(message, one_line=True))


def modes_state(current: str) -> SessionModeState:
    return SessionModeState(
        current_mode_id=current,
        available_modes=[SessionMode(id=mode, name=mode, description=text) for mode, text in MODES.items()],
    )


class RibbitAgent:
    def __init__(self, args: argparse.Namespace, model: Future[ChatModel], version: str, notify: Notify) -> None:
        self.args = args
        self.notify = notify  # writes a notification at once, from any thread (StdioTransport.write)
        self.model_future = model
        self.version = version
        self.turns = ModelTurns()
        self.sessions: dict[str, AcpSession] = {}
        self.client: Client | None = None

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    # -- the protocol ---------------------------------------------------------------------------

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None,
                         **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(embedded_context=True),
                session_capabilities=SessionCapabilities(list=SessionListCapabilities()),
            ),
            agent_info=Implementation(name="ribbit", title="ribbit", version=self.version),
            auth_methods=[],
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None  # nothing to authenticate: the model runs here

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> NewSessionResponse:
        session = await self.open(cwd)
        assert session.workspace is not None
        session.start()  # its first updates go out after this reply, which tells the editor its id
        session.preload()
        return NewSessionResponse(session_id=session.id, modes=modes_state(session.workspace.mode))

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None, **kwargs: Any) -> LoadSessionResponse:
        if session_id in self.sessions:
            raise refusal(f"session {session_id} is open already")
        try:
            root = check_repo(cwd)
            saved = SessionStore(root).load(session_id)
        except (SetupError, SessionError) as exc:
            raise refusal(str(exc)) from None
        session = await self.open(cwd, resume=saved)
        workspace = session.workspace
        assert workspace is not None
        session.confirm_folder = None  # the folder was agreed to when the session began
        session.start(now=True)
        for update in history_updates(workspace.conversation(), session.calls):
            session.push(update)  # the whole history before the reply, as the protocol asks
        session.preload()
        return LoadSessionResponse(modes=modes_state(workspace.mode))

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any) -> ListSessionsResponse:
        try:
            root = check_repo(cwd or self.args.repo)
        except SetupError as exc:
            raise refusal(str(exc)) from None
        listed = await self.turns.run(lambda: SessionStore(root).list())
        return ListSessionsResponse(sessions=[
            SessionInfo(session_id=s.session_id, cwd=s.root, title=s.title(),
                        updated_at=datetime.datetime.fromtimestamp(s.updated, datetime.UTC).isoformat())
            for s in listed
        ])

    async def set_session_mode(self, mode_id: str, session_id: str, **kwargs: Any) -> SetSessionModeResponse:
        session = self.session(session_id)
        assert session.workspace is not None
        if mode_id not in MODES:
            raise refusal(f"no mode {mode_id!r}; the modes are {', '.join(MODES)}")
        try:
            session.workspace.set_mode(mode_id)
        except ModeError as exc:
            raise refusal(str(exc)) from None
        return SetSessionModeResponse()

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        return await self.session(session_id).prompt(prompt)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.cancel()

    # -- helpers --------------------------------------------------------------------------------

    def session(self, session_id: str) -> AcpSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise refusal(f"no session {session_id[:80]!r} in this ribbit acp process (session/new or session/load first)")
        return session

    async def model(self) -> ChatModel:
        try:
            return await asyncio.wrap_future(self.model_future)
        except (ModelError, OSError) as exc:
            raise refusal(f"the model did not load: {exc}", INTERNAL_ERROR) from None

    async def open(self, cwd: str, resume: SavedSession | None = None) -> AcpSession:
        """A session's workspace on `cwd` (the TUI's refusals: no `/`, home or system folder)."""
        assert self.client is not None
        if not isinstance(cwd, str) or not Path(cwd).is_absolute():
            raise refusal(f"cwd must be an absolute path, not {str(cwd)[:200]!r}")
        try:
            root = check_repo(cwd)
            check_state()
        except SetupError as exc:
            raise refusal(str(exc)) from None
        model = await self.model()
        session = AcpSession(self.client, self.notify, asyncio.get_running_loop(), self.turns, root)
        args = self.args
        limits = Limits(context=args.context, tool_output_tokens=args.tool_output_tokens)

        def opened() -> Any:
            return open_workspace(
                model, root, mode=args.mode, approver=session.approver, sink=session.sink, limits=limits,
                no_sandbox=args.no_sandbox, reasoning=args.reasoning, save=True, resume=resume,
            )

        try:
            workspace = await self.turns.run(opened)
        except (SetupError, JournalError, SessionError, ModelError, OSError) as exc:
            raise refusal(str(exc), INTERNAL_ERROR) from None
        session.attach(workspace)
        session.custom, problems = await self.turns.run(lambda: load_commands(root))
        for line in problems:
            print(f"ribbit acp: warning: {visible(line, one_line=True)}", file=sys.stderr)
        if resume is None:
            session.confirm_folder = outside_git(root)
        self.sessions[session.id] = session
        print(f"ribbit acp: session {session.id} in {root} ({workspace.mode}; {workspace.sandbox_status})", file=sys.stderr)
        return session

    def close(self) -> None:
        """The editor went away: stop every session's agent, wait for the threads, close the workspaces."""
        for session in self.sessions.values():
            session.close()
        self.turns.executor.shutdown(wait=True)
        for session in self.sessions.values():
            if session.workspace is not None:
                session.workspace.close()
