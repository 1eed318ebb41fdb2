"""Pilot tests for plan mode in the TUI: /mode plan and the status bar, and the one key (Ctrl+G) that turns
the finished plan into a task in ask mode, whose edits still wait for approval."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.app import CARRY_OUT_PLAN
from app.screens.review import EditReviewScreen
from app.widgets.transcript import Notice, UserMessage
from tests.conftest import tree_bytes, xml_call
from tests.tui.conftest import SIZE, idle, ready, send, wait_for

pytestmark = pytest.mark.anyio

PLAN = "Plan:\n1. In calc.py, make add return a + b.\n2. Run python -m pytest -q."


def notices(app) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(n.render()) for n in app.main.transcript.query(Notice)]


async def test_ctrl_g_carries_out_the_finished_plan_in_ask_mode(tui_app, repo: Path) -> None:
    app = tui_app(
        # The plan task: an edit is refused (no question), then the plan.
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
        PLAN,
        # The task Ctrl+G sends: the edit now goes through review.
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
        "Done.",
    )
    before = tree_bytes(repo)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+g")  # no plan yet: nothing starts
        await pilot.pause(0.05)
        assert not app.busy and app.workspace.conversation() == []

        await send(pilot, "/mode plan")
        await wait_for(pilot, lambda: app.main.status.mode == "plan", what="the status bar")
        assert "mode plan" in str(app.main.status.render())
        await send(pilot, "fix the bug")
        await idle(pilot)
        assert tree_bytes(repo) == before and not isinstance(app.screen, EditReviewScreen)
        assert any("plan ready" in n and "Ctrl+G" in n for n in notices(app))

        await pilot.press("ctrl+g")
        review = await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen) and app.screen, what="review")
        assert app.workspace.mode == "ask" and app.main.status.mode == "ask"
        assert review.request.path == "calc.py" and (repo / "calc.py").read_text().endswith("a - b\n")
        await pilot.press("y")
        await idle(pilot)

        assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
        users = [m.content for m in app.workspace.conversation() if m.role == "user"]
        assert users[-1] == CARRY_OUT_PLAN + PLAN  # the plan itself, no plan-mode note
        shown = [str(u.render()) for u in app.main.transcript.query(UserMessage)]
        assert any("Carry out this plan:" in s for s in shown)
        await pilot.press("ctrl+g")  # the plan was used: the key does nothing now
        await pilot.pause(0.05)
        assert not app.busy and app.finished_plan is None


async def test_a_plan_is_only_offered_after_a_plan_mode_task(tui_app) -> None:
    app = tui_app("An answer, not a plan.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "hello")
        await idle(pilot)
        assert app.finished_plan is None and not any("plan ready" in n for n in notices(app))
