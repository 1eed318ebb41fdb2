"""The system prompt is read while the user types (issue 13, item 4): the TUI preloads it through the
session, on the embedded SmolLM2 GGUF and a tiny qwen35 GGUF, and the first task reads only what follows."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agent.core.events import AgentEvent, PrefillEvent, SummaryEvent
from agent.core.loop import Limits
from app.app import make_app
from models.embedded import embedded_model_path
from models.llama_backend import LlamaCppModel
from tests.tui.conftest import SIZE, idle, ready, send, wait_for

pytestmark = pytest.mark.real_model
LIMITS = Limits(max_steps=1, turn_tokens=8, context=4096)


def preloaded(app, model) -> bool:  # type: ignore[no-untyped-def]
    return model.stats.evaluated > 0 and not app.preloading


@pytest.fixture(params=["embedded", "qwen35"])
def model(request, tmp_path: Path, thinking_qwen35: Path):  # type: ignore[no-untyped-def]
    path = embedded_model_path() if request.param == "embedded" else thinking_qwen35
    loaded = LlamaCppModel(path, n_ctx=4096, temperature=0.0, state_dir=tmp_path / "states")
    yield loaded
    loaded.close()


@pytest.mark.anyio
async def test_the_system_prompt_is_read_before_the_first_task_and_again_after_clear(repo: Path, model) -> None:  # type: ignore[no-untyped-def]
    app = make_app(repo, model, limits=LIMITS)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await wait_for(pilot, lambda: preloaded(app, model), timeout=120, what="the preload")
        # Nobody has typed anything, and the system prompt is in the model's context already.
        system = model.stream_tokens()
        text = model.llm.detokenize(system, special=True).decode("utf-8", "replace")
        assert len(system) > 100 and app.workspace.session.messages[0].content[-200:] in text
        assert model.stats.evaluated == len(system)

        await send(pilot, "Say hi.")
        await idle(pilot)
        first = model.stats.turns[0]
        assert first.cached_tokens == len(system)  # the task read only its own message
        assert model.stream_tokens()[: len(system)] == system
        assert model.stats.evaluated == len(model.stream_tokens())  # nothing was read twice
        evaluated = model.stats.evaluated

        await send(pilot, "/clear")
        await wait_for(pilot, lambda: model.stream_tokens() == system and preloaded(app, model), timeout=120,
                       what="the system prompt back after /clear")
        assert model.stats.evaluated == evaluated  # restored from its snapshot, not read again
        await send(pilot, "Say bye.")
        await idle(pilot)
        assert model.stats.turns[-1].cached_tokens == len(system)


@pytest.mark.anyio
async def test_a_model_switched_to_with_model_reads_the_system_prompt_before_the_first_task(repo: Path, tmp_path: Path) -> None:
    first = LlamaCppModel(embedded_model_path(), n_ctx=4096, temperature=0.0, state_dir=tmp_path / "states")
    app = make_app(repo, first, limits=LIMITS)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await wait_for(pilot, lambda: preloaded(app, first), timeout=120, what="the first preload")
            system = first.stream_tokens()
            await send(pilot, f"/model {embedded_model_path()}")
            await wait_for(pilot, lambda: app.model is not first, timeout=120, what="the switch")
            second = app.model
            assert isinstance(second, LlamaCppModel)
            # Read (or loaded from its saved state) before anyone typed a task.
            await wait_for(pilot, lambda: second.stream_tokens() == system and not app.preloading, timeout=120,
                           what="the new model's preload")
            await send(pilot, "Say hi.")
            await idle(pilot)
            assert second.stats.turns[0].cached_tokens == len(system)
    finally:
        first.close()


def test_a_task_started_during_the_preload_waits_for_it_and_reads_nothing_twice(repo: Path, tmp_path: Path) -> None:
    from agent.session.workspace import open_workspace
    from agent.core.approvals import RejectAll

    model = LlamaCppModel(embedded_model_path(), n_ctx=4096, temperature=0.0, state_dir=tmp_path / "states",
                          persist_states=False)
    model.prefill_chunk = 64  # several batches, so that the task arrives while the preload is under way
    events: list[AgentEvent] = []
    reading = threading.Event()

    def sink(event: AgentEvent) -> None:
        events.append(event)
        if isinstance(event, PrefillEvent):
            reading.set()

    workspace = open_workspace(model, repo, mode="ask", approver=RejectAll(), sink=sink, limits=LIMITS,
                               watch=False)
    try:
        preload = threading.Thread(target=workspace.preload)
        preload.start()
        assert reading.wait(60)
        summary = workspace.run("Say hi.")
        preload.join()
        assert isinstance(summary, SummaryEvent) and summary.stop_reason != "error"
        system = model.stats.turns[0].cached_tokens
        assert system > 100  # the run found the whole system prompt read
        assert model.stats.evaluated == len(model.stream_tokens())
    finally:
        workspace.close()
        model.close()


@pytest.mark.anyio
async def test_a_resumed_conversation_whose_saved_state_is_gone_is_read_before_the_next_task(repo: Path, tmp_path: Path) -> None:
    from agent.session.store import SessionStore
    from tests.functional.helpers import ribbit_subprocess

    done = ribbit_subprocess("run", "Say hello.", "--repo", str(repo), "--threads", "1", "--temperature", "0",
                             "--draft", "none", "--mode", "auto-edit", "--no-sandbox", "--max-steps", "1",
                             "--max-turn-tokens", "16", "--context", "2048")
    assert done.returncode in (0, 3) and "Traceback" not in done.stderr, done.stderr
    store = SessionStore(repo)
    saved = store.latest()
    (store.folder / saved.session_id / "latest.state").unlink()  # evicted: the next turn would read it all
    model = LlamaCppModel(embedded_model_path(), n_ctx=4096, temperature=0.0, state_dir=tmp_path / "states")
    app = make_app(repo, model, limits=LIMITS, continue_last=True)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await wait_for(pilot, lambda: preloaded(app, model), timeout=120, what="the preload")
            held = model.stream_tokens()
            text = model.llm.detokenize(held, special=True).decode("utf-8", "replace")
            assert "Say hello." in text and len(held) > len(model._system_tokens or []) + 5  # noqa: SLF001
            await send(pilot, "Now say goodbye.")
            await idle(pilot)
            turn = model.stats.turns[0]
            assert turn.cached_tokens == len(held)  # the old conversation was not read again
            assert turn.evaluated_tokens == turn.prompt_tokens - len(held)
    finally:
        model.close()
