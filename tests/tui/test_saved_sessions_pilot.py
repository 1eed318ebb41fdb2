"""Pilot tests for `/compact`, `/rewind` and the resume picker (`ribbit --resume`), on replay models and real
git repositories: outcomes checked on disk, in the session's conversation and in the saved session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.session.store import SessionStore
from app.app import make_app
from app.screens.sessions import RewindScreen, SessionPickerScreen
from app.widgets.transcript import Notice, UserMessage
from models.base import Chunk, GenerationRequest
from models.replay import ReplayModel
from tests.conftest import xml_call
from tests.tui.conftest import SIZE, idle, ready, send, wait_for

pytestmark = pytest.mark.anyio


def notices(app) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(n.render()) for n in app.main.transcript.query(Notice)]


def users(app) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(u.render()) for u in app.main.transcript.query(UserMessage)]


class RecordingReplay(ReplayModel):
    """A replay model that keeps what each turn was asked (to see what /compact sends the model)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.requests: list[GenerationRequest] = []

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        self.requests.append(request)
        return super().generate(request)


async def test_compact_summarises_the_conversation_and_goes_on_from_it(repo: Path, replay_file) -> None:
    model = RecordingReplay(replay_file(xml_call("Read", file_path="calc.py"), "add() subtracts.",
                                        "Summary: calc.py read; add() subtracts; nothing changed yet.", "Sure."))
    app = make_app(repo, model, mode="auto-edit")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "what does add do?")
        await idle(pilot)
        await send(pilot, "/compact the bug in add")
        await wait_for(pilot, lambda: any(n.startswith("compacted:") for n in notices(app)), what="compaction")
        await idle(pilot)
        session = app.workspace.session
        asked = model.requests[-1].messages[-1].content
        assert "Focus on: the bug in add" in asked and "make no tool call" in asked
        assert [m.role for m in session.messages] == ["system", "user"]
        assert "Summary: calc.py read; add() subtracts" in session.messages[1].content
        await send(pilot, "fix it")
        await idle(pilot)
        # The next task reads the summary, not the old conversation.
        sent = [m.content for m in model.requests[-1].messages]
        assert not any("what does add do?" in c for c in sent) and any("Summary: calc.py read" in c for c in sent)
        saved = SessionStore(repo).latest()
        assert len(saved.epochs) == 2 and saved.epochs[0][1].content == "what does add do?"


async def test_rewind_puts_files_and_conversation_back_to_before_a_prompt(repo: Path, replay_file) -> None:
    turns = [
        xml_call("Write", file_path="notes.txt", content="one\n"), "Wrote one.",
        xml_call("Read", file_path="notes.txt"),
        xml_call("Edit", file_path="notes.txt", old_string="one", new_string="two"), "Now two.",
    ]
    app = make_app(repo, f"replay:{replay_file(*turns)}", mode="auto-edit")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "write one")
        await idle(pilot)
        before_second = [m.model_copy() for m in app.workspace.session.messages]
        after_first = (repo / "notes.txt").read_bytes()
        await send(pilot, "make it two")
        await idle(pilot)
        assert (repo / "notes.txt").read_text() == "two\n"

        await send(pilot, "/rewind")
        await wait_for(pilot, lambda: isinstance(app.screen, RewindScreen), what="the rewind list")
        assert app.screen.prompts == ["write one", "make it two"]
        await pilot.press("enter")  # the newest prompt is highlighted first: files and conversation
        await wait_for(pilot, lambda: any(n.startswith("rewound:") for n in notices(app)), what="the rewind")
        assert (repo / "notes.txt").read_bytes() == after_first  # byte for byte
        assert app.workspace.session.messages == before_second
        assert app.main.prompt.text == "make it two"  # ready to be edited and sent again
        assert users(app) == ["write one"]
        assert [t.prompt for t in SessionStore(repo).latest().tasks] == ["write one"]


async def test_rewind_refuses_in_one_line_where_the_journal_refuses(repo: Path, replay_file) -> None:
    turns = [xml_call("Write", file_path="notes.txt", content="one\n"), "Wrote one."]
    app = make_app(repo, f"replay:{replay_file(*turns)}", mode="auto-edit")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "write one")
        await idle(pilot)
        (repo / "notes.txt").write_text("the user's own work\n")  # changed by someone else since
        await send(pilot, "/rewind")
        await wait_for(pilot, lambda: isinstance(app.screen, RewindScreen), what="the rewind list")
        await pilot.press("f")  # files only
        await wait_for(pilot, lambda: any("rewind:" in n for n in notices(app)), what="the refusal")
        line = next(n for n in notices(app) if "rewind:" in n)
        assert "nothing was restored" in line and "\n" not in line.strip()
        assert (repo / "notes.txt").read_text() == "the user's own work\n"


async def test_the_resume_picker_reopens_the_chosen_session(repo: Path, replay_file) -> None:
    for task, answer in (("first task", "First done."), ("second task", "Second done.")):
        app = make_app(repo, f"replay:{replay_file(answer, name=task.replace(' ', '-') + '.jsonl')}")
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, task)
            await idle(pilot)
        app.close_workspace()
    sessions = SessionStore(repo).list()
    assert [s.title() for s in sessions] == ["second task", "first task"]

    app = make_app(repo, f"replay:{replay_file('Going on.', name='third.jsonl')}", resume="")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SessionPickerScreen), what="the picker")
        await pilot.press("down", "enter")  # the older one
        await ready(pilot)
        assert users(app) == ["first task"]
        assert app.workspace.saved is not None and app.workspace.saved.session_id == sessions[1].session_id
        await send(pilot, "go on")
        await idle(pilot)
    app.close_workspace()
    resumed = SessionStore(repo).load(sessions[1].session_id)
    assert [t.prompt for t in resumed.tasks] == ["first task", "go on"]
    assert resumed.messages[-1].content == "Going on."

