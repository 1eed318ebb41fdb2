"""The SDK's own client side, spawning `python -m app.cli acp` (agent-client-protocol's spawn_agent_process):
a client that records every update and answers permission requests as a test says."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, spawn_agent_process
from acp.exceptions import RequestError
from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallUpdate,
)

ROOT = Path(__file__).resolve().parents[2]


def allow(option_id: str = "allow_once", reason: str | None = None) -> RequestPermissionResponse:
    return RequestPermissionResponse(
        outcome=AllowedOutcome(outcome="selected", option_id=option_id),
        field_meta={"reason": reason} if reason else None,
    )


def reject(reason: str | None = None) -> RequestPermissionResponse:
    return allow("reject_once", reason)


def cancelled() -> RequestPermissionResponse:
    return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


@dataclass
class Asked:
    session_id: str
    tool_call: ToolCallUpdate
    options: list[PermissionOption]


@dataclass
class RecordingClient:
    """An editor: keeps every update in order; answers each permission request with the next answer."""

    answers: list[Callable[[Asked], RequestPermissionResponse] | RequestPermissionResponse] = field(default_factory=list)
    updates: list[tuple[str, Any]] = field(default_factory=list)
    asked: list[Asked] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self.changed.set()

    async def request_permission(self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption],
                                 **kwargs: Any) -> RequestPermissionResponse:
        asked = Asked(session_id, tool_call, options)
        self.asked.append(asked)
        self.changed.set()
        if not self.answers:
            return cancelled()
        answer = self.answers.pop(0)
        return answer(asked) if callable(answer) else answer

    async def write_text_file(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("fs/write_text_file")

    async def read_text_file(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("fs/read_text_file")

    async def create_terminal(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("terminal/create")

    # -- what tests look at -----------------------------------------------------------------------

    def of_kind(self, kind: str, session_id: str | None = None) -> list[Any]:
        return [u for s, u in self.updates if u.session_update == kind and (session_id is None or s == session_id)]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u.content.text for u in self.of_kind(kind) if getattr(u.content, "type", "") == "text")

    def tool_calls(self) -> list[Any]:
        return self.of_kind("tool_call")

    def tool_updates(self, tool_call_id: str) -> list[Any]:
        return [u for u in self.of_kind("tool_call_update") if u.tool_call_id == tool_call_id]

    async def wait_for(self, check: Callable[[], Any], timeout: float = 60.0) -> Any:
        """Until `check()` is truthy (re-checked on every update, and every 0.1 s for what no update tells);
        its value."""
        async def wait() -> Any:
            while not (found := check()):
                self.changed.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), 0.1)
            return found
        return await asyncio.wait_for(wait(), timeout)


def agent_env() -> dict[str, str]:
    env = dict(os.environ)  # the tests' isolated XDG folders (tests/conftest.py) go with it
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@asynccontextmanager
async def ribbit_acp(client: RecordingClient, model: str, *args: str, stderr: Path) -> AsyncIterator[tuple[Any, Any]]:
    """`ribbit acp --model MODEL ARGS` spawned by the SDK's client side, initialised; (connection, process)."""
    with stderr.open("ab") as err:
        async with spawn_agent_process(
            client, sys.executable, "-m", "app.cli", "acp", "--model", model, *args,
            env=agent_env(), cwd=ROOT, transport_kwargs={"stderr": err.fileno(), "shutdown_timeout": 30.0},
        ) as (conn, process):
            reply = await conn.initialize(protocol_version=PROTOCOL_VERSION)
            assert reply.agent_capabilities.load_session
            yield conn, process


def run(coro: Any, timeout: float = 120.0) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))
