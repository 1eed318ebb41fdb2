"""Pilot tests for `/think` (on a real tiny qwen35 GGUF with the Qwen3.5 template, and on a replay model
without a switch) and `/init` (the drafted AGENTS.md is a diff that waits for approval)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.core.instructions import INIT_TASK
from agent.core.loop import Limits
from app.app import make_app
from app.screens.review import EditReviewScreen
from app.widgets.transcript import Notice, UserMessage
from models.llama_backend import LlamaCppModel
from tests.conftest import xml_call
from tests.tui.conftest import SIZE, idle, ready, send, wait_for

pytestmark = pytest.mark.anyio

OFF_PROMPT = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


def notices(app) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(n.render()) for n in app.main.transcript.query(Notice)]


async def test_think_switches_the_next_prompt_on_a_real_hybrid_model(repo: Path, thinking_qwen35: Path,
                                                                     tmp_path: Path) -> None:
    model = LlamaCppModel(thinking_qwen35, n_ctx=8192, temperature=0.0, state_dir=tmp_path / "states")
    app = make_app(repo, model, limits=Limits(max_steps=1, turn_tokens=6, context=8192))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert app.main.status.reasoning == "on"  # the template's default
        await send(pilot, "hello")
        await idle(pilot)
        before = model.stream_tokens()

        await send(pilot, "/think off")
        await wait_for(pilot, lambda: app.main.status.reasoning == "off", what="the status bar")
        assert "think off" in str(app.main.status.render())
        assert any("reasoning off from the next turn" in n for n in notices(app))
        await send(pilot, "go on")
        await idle(pilot)
        stream = model.stream_tokens()
        assert stream[: len(before)] == before  # appended to, never re-read
        assert model.stats.evaluated == len(stream)  # tokens evaluated / appended = 1.00 across the switch
        text = model.llm.detokenize(stream[len(before) :], special=True).decode("utf-8", "replace")
        assert "<|im_start|>user\ngo on<|im_end|>\n" + OFF_PROMPT in text

        await send(pilot, "/think")
        await wait_for(pilot, lambda: any("reasoning is off; /think on|off" in n for n in notices(app)), what="state")
        await send(pilot, "/think maybe")
        await wait_for(pilot, lambda: any("/think takes on or off" in n for n in notices(app)), what="error")
        assert app.main.status.reasoning == "off"


async def test_think_on_a_model_without_a_switch_says_so(tui_app) -> None:
    app = tui_app("Hi.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert app.main.status.reasoning == ""  # nothing to show
        await send(pilot, "/think off")
        await wait_for(pilot, lambda: any("has no reasoning switch" in n for n in notices(app)), what="the notice")
        assert "think" not in str(app.main.status.render())


async def test_init_shows_the_drafted_agents_md_as_a_diff_and_writes_nothing_before_approval(tui_app, repo: Path) -> None:
    draft = "# calc\n\nRun the tests with `python -m pytest -q`.\n"
    app = tui_app(xml_call("Glob", pattern="*"), xml_call("Write", file_path="AGENTS.md", content=draft),
                  "Wrote AGENTS.md.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "/init")
        review = await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen) and app.screen, what="review")
        assert review.request.path == "AGENTS.md" and review.request.is_new_file
        assert "+Run the tests with `python -m pytest -q`." in review.request.diff
        assert not (repo / "AGENTS.md").exists()  # nothing on disk while the diff waits
        await pilot.press("y")
        await idle(pilot)
        assert (repo / "AGENTS.md").read_text() == draft
        session = app.workspace.session
        assert [m.content for m in session.messages if m.role == "user"] == [INIT_TASK]
        assert [str(u.render()) for u in app.main.transcript.query(UserMessage)] == ["/init"]
