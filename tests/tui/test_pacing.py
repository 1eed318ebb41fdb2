"""Frame pacing (app/screens/pacing.py): a change is drawn at once, or when the last frame is a period old."""

from __future__ import annotations

import asyncio
import inspect
import time

import pytest
from textual import events
from textual.screen import Screen

from app.screens.pacing import PERIOD_S, PacedScreen
from tests.tui.conftest import SIZE, ready

def test_textual_still_has_the_hooks_pacing_relies_on() -> None:
    # Renamed or removed in a Textual upgrade, pacing would silently stop: fail here instead.
    assert inspect.iscoroutinefunction(Screen._on_idle)
    assert callable(Screen._on_timer_update)
    assert not inspect.signature(Screen._on_timer_update).parameters.keys() - {"self"}


@pytest.mark.anyio
async def test_a_change_is_drawn_at_once_then_paced(tui_app, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import app.screens.pacing as pacing

    app = tui_app("Hello.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        screen = app.main
        assert isinstance(screen, PacedScreen)
        draws: list[float] = []
        draw_frame = screen._on_timer_update

        def counting_draw() -> None:
            draws.append(time.monotonic())
            draw_frame()

        screen._on_timer_update = counting_draw  # type: ignore[method-assign]

        # The last frame is older than a period: the change is drawn in this very idle pass.
        screen._drawn_at = time.monotonic() - 1.0
        screen.refresh()
        idle = events.Idle()
        await screen._on_idle(idle)
        assert len(draws) == 1
        assert idle._no_default_action  # Textual's own timer was not resumed

        # Just drawn: the next change waits for the rest of the period, on a single timer. The pacing
        # clock stands still here, so a loaded machine cannot make the period run out between the calls.
        frozen = screen._drawn_at
        monkeypatch.setattr(pacing.time, "monotonic", lambda: frozen)
        screen.refresh()
        await screen._on_idle(events.Idle())
        first_timer = screen._draw_timer
        await screen._on_idle(events.Idle())
        monkeypatch.undo()
        assert len(draws) == 1 and first_timer is not None and screen._draw_timer is first_timer
        assert 0 < first_timer._interval <= PERIOD_S + 1e-6  # the rest of a period, computed from clock readings

        # Drawn once more (by the timer, or by an idle pass once the period is over), and the timer,
        # having fired, is gone: no second timer was stacked on it.
        deadline = time.monotonic() + 5.0
        while (len(draws) < 2 or screen._draw_timer is first_timer) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        assert len(draws) >= 2
        assert screen._draw_timer is not first_timer
        drawn = len(draws)

        # A keystroke is echoed at once, however recent the last frame.
        screen._drawn_at = time.monotonic() + 3600  # paced, the next frame would be an hour away
        app.post_message(events.Key("y", "y"))
        echoed = False
        deadline = time.monotonic() + 5.0
        while not echoed and time.monotonic() < deadline:
            await asyncio.sleep(0)
            echoed = app.main.prompt.text == "y" and len(draws) > drawn
        assert echoed
        assert screen._key_at == 0.0  # the echo went out; pacing is back on


def test_every_screen_is_paced() -> None:
    from app.screens.bash import BashApprovalScreen
    from app.screens.main import MainScreen
    from app.screens.review import EditReviewScreen
    from app.screens.session_diff import SessionDiffScreen

    for screen in (MainScreen, EditReviewScreen, BashApprovalScreen, SessionDiffScreen):
        assert issubclass(screen, PacedScreen), screen.__name__


def test_full_collections_wait_for_a_quiet_moment() -> None:
    import gc

    from app.app import QuietCollector

    before = gc.get_threshold()
    collector = QuietCollector()
    collector.start()
    try:
        assert gc.get_threshold()[:2] == before[:2]  # young generations as usual
        assert gc.get_threshold()[2] == QuietCollector.NEVER  # no automatic full pass
        now = time.monotonic()
        collector.collected_at = now - 2 * QuietCollector.EVERY_S
        assert not collector.tick(last_key_at=now)  # someone is typing: not now
        assert collector.tick(last_key_at=now - 2 * QuietCollector.QUIET_S)  # quiet and due
        assert not collector.tick(last_key_at=0.0)  # just collected: not due again yet
    finally:
        collector.stop()
    assert gc.get_threshold() == before
