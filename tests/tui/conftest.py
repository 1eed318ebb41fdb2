"""Helpers for the Pilot tests: a replay-driven app on a real temporary git repo."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from app.app import RibbitApp, make_app

SIZE = (120, 36)


async def wait_for(pilot, condition: Callable[[], object], timeout: float = 20.0, what: str = "condition"):  # type: ignore[no-untyped-def]
    """Let the app run until `condition()` holds (a deadline, not a timing assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.02)
    return condition()


async def ready(pilot) -> RibbitApp:  # type: ignore[no-untyped-def]
    app: RibbitApp = pilot.app
    await wait_for(pilot, lambda: app.workspace is not None, what="the workspace")
    app.main.prompt.cursor_blink = False  # a blinking cursor would make snapshots flaky
    return app


async def send(pilot, text: str) -> None:  # type: ignore[no-untyped-def]
    """Type a prompt and press Enter, as a user would."""
    app: RibbitApp = pilot.app
    app.main.prompt.focus()
    app.main.prompt.insert(text)
    await pilot.press("enter")


async def idle(pilot) -> None:  # type: ignore[no-untyped-def]
    app: RibbitApp = pilot.app
    await pilot.pause(0.05)
    await wait_for(pilot, lambda: not app.busy, what="the agent to finish")
    await pilot.pause(0.05)


@pytest.fixture
def tui_app(repo: Path, replay_file):  # type: ignore[no-untyped-def]
    """make(*turns, **make_app kwargs) -> app on the `repo` fixture, with a replay model of `turns`."""

    def make(*turns: str, delay: float = 0.0, **kwargs: object) -> RibbitApp:
        path = replay_file(*turns)
        spec = f"replay:{path}" + (f"#delay={delay}" if delay else "")
        return make_app(repo, spec, **kwargs)  # type: ignore[arg-type]

    return make


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
