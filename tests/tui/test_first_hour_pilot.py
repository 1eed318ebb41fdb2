"""Issue 32 in the TUI: what a newcomer meets in the first hour, driven with Pilot on replay models and real
git repositories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.core.approvals import project_allow_list
from agent.core.events import CompactionEvent
from agent.paths import project_state
from app.app import make_app
from app.screens.review import EditReviewScreen
from app.screens.session_diff import SessionDiffScreen
from app.widgets.transcript import Notice, ToolCard
from tests.conftest import xml_call
from tests.tui.conftest import SIZE, idle, ready, send, wait_for

pytestmark = pytest.mark.anyio


def notices(app, level: str | None = None) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(n.render()) for n in app.main.transcript.query(Notice) if level is None or n.level == level]


async def test_a_model_that_fails_to_load_says_so_where_the_user_types_and_model_opens_the_session(
        repo: Path, replay_file, tmp_path: Path) -> None:
    app = make_app(repo, str(tmp_path / "nonexistent.gguf"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.setup_error is not None, what="the failed load")
        errors = notices(app, "error")
        assert errors and "did not load" in errors[-1] and "/model" in errors[-1] and "--model" in errors[-1]
        assert app.main.status.model_name == "no model"
        assert "/model" in str(app.main.prompt.placeholder)
        await send(pilot, "fix the bug")
        await pilot.pause(0.1)
        assert not any("still loading" in n for n in notices(app))
        assert "not sent" in notices(app, "error")[-1]
        assert app.pending_task is None
        # Another model opens the session, and the next task runs on it.
        await send(pilot, f"/model replay:{replay_file('Hello from the replay.')}")
        await ready(pilot)
        await send(pilot, "say hello")
        await idle(pilot)
        assert app.workspace is not None
        assert app.workspace.session.messages[-1].content == "Hello from the replay."


async def test_a_refused_folder_is_one_line_and_no_task_waits_for_it(replay_file) -> None:
    app = make_app(Path.home(), f"replay:{replay_file('never')}")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.setup_error is not None, what="the refusal")
        assert "home folder" in app.setup_error and "--repo" in app.setup_error
        await send(pilot, "hello")
        await pilot.pause(0.1)
        assert not any("still loading" in n for n in notices(app))


async def test_a_rejected_write_card_is_not_green_and_the_review_header_claims_nothing(tui_app, repo: Path) -> None:
    app = tui_app(xml_call("Write", file_path="notes.md", content="# notes\n"), "OK.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "write notes")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen) and app.screen, what="review")
        header = str(screen.query_one("#review-selection").render())
        assert "applying" not in header and "selected" in header
        await pilot.press("n")
        await pilot.press("enter")
        await idle(pilot)
        assert not (repo / "notes.md").exists()
        card = app.main.transcript.query(ToolCard).first()
        assert card.state == "rejected"
        assert "✓" not in card.header_text().plain and "rejected" in card.header_text().plain


async def test_keys_typed_while_diff_is_open_go_to_the_prompt(tui_app, repo: Path) -> None:
    app = tui_app(xml_call("Write", file_path="notes.md", content="# notes\n"), "Done.", mode="auto-edit")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "write notes")
        await idle(pilot)
        await send(pilot, "/diff")
        await wait_for(pilot, lambda: isinstance(app.screen, SessionDiffScreen), what="/diff")
        await pilot.press(*"next")
        await wait_for(pilot, lambda: not isinstance(app.screen, SessionDiffScreen), what="/diff closed")
        await pilot.pause(0.05)
        assert app.main.prompt.text == "next"


async def test_the_gauge_moves_while_the_model_writes_and_no_thinking_without_reasoning(tui_app) -> None:
    long_answer = " ".join(f"word{i}" for i in range(120))
    app = tui_app(long_answer, delay=0.02)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        start = app.main.status.context_used
        seen: set[str] = set()
        await send(pilot, "talk")
        # Mid-turn (the answer is not in the conversation yet), the gauge has already moved.
        await wait_for(pilot, lambda: (seen.add(app.main.status.activity) or True)
                       and app.main.status.context_used > start + 16, what="the gauge to move")
        assert app.workspace.session.messages[-1].role == "user"
        await idle(pilot)
        assert "thinking" not in seen and "writing" in seen


async def test_compact_shows_the_summary_and_the_bar_matches_its_figure(tui_app) -> None:
    summary = "Summary: calc.py read; add() subtracts; nothing changed yet."
    app = tui_app(xml_call("Read", file_path="calc.py"), "add() subtracts. " * 40, summary, mode="auto-edit")
    events: list[CompactionEvent] = []
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        sink = app.bridge.sink
        app.workspace.session.sink = lambda e: (events.append(e) if isinstance(e, CompactionEvent) else None, sink(e))[1]
        await send(pilot, "what does add do?")
        await idle(pilot)
        await send(pilot, "/compact")
        await wait_for(pilot, lambda: any(n.startswith("compacted:") for n in notices(app)), what="compaction")
        await idle(pilot)
        assert any(summary in n for n in notices(app))
        done = next(n for n in notices(app) if n.startswith("compacted:"))
        after = int(done.split("→")[1].split()[0])
        assert app.main.status.context_used == after


async def test_clear_resets_the_gauge_and_the_rewind_list(tui_app) -> None:
    app = tui_app("First answer. " * 30, "Second answer.", mode="auto-edit")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "first")
        await idle(pilot)
        before = app.main.status.context_used
        await send(pilot, "/clear")
        await wait_for(pilot, lambda: not app.preloading, what="the preload")
        await pilot.pause(0.1)
        assert app.main.status.context_used < before
        await send(pilot, "/rewind")
        await pilot.pause(0.05)
        assert "nothing to rewind" in notices(app, "warning")[-1]


async def test_allowed_lists_and_revokes_a_prefix(tui_app, repo: Path) -> None:
    project_allow_list(repo.resolve()).add("python3 -m pytest")
    app = tui_app("Hi.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "/allowed")
        await pilot.pause(0.05)
        assert "python3 -m pytest" in notices(app)[-1]
        await send(pilot, "/allowed revoke 1")
        await pilot.pause(0.05)
        assert "revoked" in notices(app)[-1]
        stored = json.loads((project_state(repo.resolve()) / "allow.json").read_text())
        assert stored == {"allow": []}
        assert not app.workspace.session.approvals.policy.allow.allows("python3 -m pytest -q")


async def test_always_allow_says_what_it_saved(tui_app, repo: Path) -> None:
    from app.screens.bash import BashApprovalScreen

    app = tui_app(xml_call("Bash", command="python3 -m pytest -q test_calc.py"), "Ran.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "run the tests")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, BashApprovalScreen) and app.screen, what="bash")
        assert "python3 -m pytest" in str(screen.query_one("#bash-keys").render())
        await pilot.press("p")
        await idle(pilot)
        stored = json.loads((project_state(repo.resolve()) / "allow.json").read_text())
        assert stored == {"allow": ["python3 -m pytest"]}
        assert any("'python3 -m pytest'" in n for n in notices(app))




async def test_outside_git_is_said_once_and_asked(replay_file, tmp_path: Path) -> None:
    from app.screens.confirm import ConfirmScreen

    folder = tmp_path / "plain"
    folder.mkdir()
    app = make_app(folder, f"replay:{replay_file('Hello.')}")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        assert sum("not in a git repository" in n for n in notices(app)) == 1
        await pilot.press("y")
        await send(pilot, "hi")
        await idle(pilot)
        assert app.workspace.session.messages[-1].content == "Hello."
    quitting = make_app(folder, f"replay:{replay_file('Hello.')}")
    async with quitting.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(quitting.screen, ConfirmScreen), what="the question")
        await pilot.press("n")
        await wait_for(pilot, lambda: not quitting.is_running, what="the app to quit")
