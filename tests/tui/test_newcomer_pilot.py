"""Issue 40's TUI items, as a newcomer meets them: one Ctrl+C stops a turn, an 80x24 terminal keeps the
mode and the sandbox in view and the diff header on one line, an over-long paste is refused and kept, and
a resumed session shows rejected calls as rejected. Outcomes on disk and in the session where they happen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.text import Text

from agent.session import Limits
from app.app import make_app
from app.screens.review import EditReviewScreen
from app.widgets.transcript import AssistantText, Notice, ToolCard, UserMessage
from models.embedded import EMBEDDED_NAME
from tests.conftest import xml_call
from tests.tui.conftest import SIZE, idle, ready, send, wait_for

pytestmark = pytest.mark.anyio

READ_CALC = xml_call("Read", file_path="calc.py")
FIX_ADD = xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b")


def notices(app, level: str | None = None) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(n.render()) for n in app.main.transcript.query(Notice) if level is None or n.level == level]


async def test_one_ctrl_c_stops_the_turn_and_a_second_quits(tui_app) -> None:
    long_text = " ".join(f"word{i}" for i in range(400))
    app = tui_app(long_text, "Second answer.", delay=0.02)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "talk a lot")
        await wait_for(pilot, lambda: app.main.transcript.query(AssistantText) and "word5" in
                       app.main.transcript.query(AssistantText).last().text_so_far, what="streaming")
        await pilot.press("ctrl+c")
        await idle(pilot)
        assert app.is_running  # one Ctrl+C stopped the turn, not the program
        assert "word399" not in app.main.transcript.query(AssistantText).first().text_so_far
        assert any("stopped by the user" in n for n in notices(app, "warning"))
        assert app.workspace.session.messages[-1].role == "assistant"  # the cut turn is kept as it was

        await pilot.pause(2.1)  # past the window: the next Ctrl+C is a first one again
        await send(pilot, "go on")
        await idle(pilot)
        assert "Second answer." in app.main.transcript.query(AssistantText).last().text_so_far
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.is_running  # idle: the first Ctrl+C only warns
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_code == 0


async def test_80x24_keeps_mode_and_sandbox_and_a_one_line_diff_header(repo: Path, replay_file) -> None:
    long_name = "src_calculator_module_with_a_long_name.py"
    (repo / long_name).write_text("def add(a, b):\n    return a - b\n")
    replay = replay_file(
        xml_call("Read", file_path=long_name),
        "Fixing it.\n" + xml_call("Edit", file_path=long_name, old_string="a - b", new_string="a + b"),
        "Done.", name="a-recording-with-a-rather-long-file-name.jsonl",
    )
    app = make_app(repo, f"replay:{replay}", no_sandbox=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        status = app.main.status
        status.tokens_per_s, status.external_changes, status.reasoning = 12.3, 2, "on"
        await pilot.pause()
        shown = status.render()
        assert isinstance(shown, Text) and shown.cell_len <= status.size.width
        assert "mode ask" in shown.plain and "sandbox OFF" in shown.plain and "2 changed outside" in shown.plain

        await send(pilot, "fix add")
        review = await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen) and app.screen, what="review")
        await pilot.pause()
        title, header = review.query_one("#review-title"), review.query_one("#review-header")
        said, hunks = review.query_one("#review-said"), review.query_one("#hunks")
        assert title.region.height == 1 and header.region.height == 1
        assert "Fixing it." in str(said.render())  # what the model said about the change, above it
        assert header.region.bottom <= said.region.y and said.region.bottom <= hunks.region.y  # nothing overlaps
        await pilot.press("y")
        await idle(pilot)
    assert (repo / long_name).read_text() == "def add(a, b):\n    return a + b\n"


async def test_an_over_long_paste_is_refused_and_kept_in_the_prompt(tui_app, repo: Path) -> None:
    app = tui_app(READ_CALC, "Read it.", context=4096, limits=Limits(context=4096))
    paste = "".join(f"log line {i}: something happened here\n" for i in range(800))  # ~8,000 tokens
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "here is my log:\n" + paste)
        await wait_for(pilot, lambda: notices(app, "error"), what="the refusal")
        await idle(pilot)
        (refusal,) = notices(app, "error")
        assert "not sent" in refusal and "back in the prompt" in refusal and "\n" not in refusal.strip()
        assert app.main.prompt.text == "here is my log:\n" + paste.strip()  # nothing of the paste lost
        assert not app.main.transcript.query(UserMessage)  # not sent: not in the transcript either
        assert [m.role for m in app.workspace.session.messages] == ["system"]  # the model never got it
        assert app.workspace.session.model.position == 0  # nothing generated, nothing compacted

        app.main.prompt.clear()
        await send(pilot, "read calc.py")  # a message that fits goes as usual
        await idle(pilot)
        assert [u.text for u in app.main.transcript.query(UserMessage)] == ["read calc.py"]
        assert [m.role for m in app.workspace.session.messages][1:] == ["user", "assistant", "tool", "assistant"]


async def test_a_resumed_session_marks_rejected_calls_rejected(repo: Path, replay_file) -> None:
    replay = replay_file(READ_CALC, FIX_ADD, "Leaving it.")
    before = (repo / "calc.py").read_bytes()
    first = make_app(repo, f"replay:{replay}")
    async with first.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "fix add")
        await wait_for(pilot, lambda: isinstance(first.screen, EditReviewScreen), what="review")
        await pilot.press("n")
        await pilot.press(*"no thanks")
        await pilot.press("enter")
        await idle(pilot)
        edit_id = [c for c in first.main.transcript.query(ToolCard) if c.call.name == "Edit"][0].call.id
        first.close_workspace()
    assert (repo / "calc.py").read_bytes() == before
    (saved,) = (p for p in Path(first.workspace.saved.recorder.folder).glob("session.json"))
    assert json.loads(saved.read_text())["rejected"] == [edit_id]  # on disk, with the session

    second = make_app(repo, f"replay:{replay}", continue_last=True)
    async with second.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await wait_for(pilot, lambda: len(second.main.transcript.query(ToolCard)) == 2, what="the old calls")
        states = {c.call.name: c.state for c in second.main.transcript.query(ToolCard)}
        assert states == {"Read": "done", "Edit": "rejected"}
        edit = [c for c in second.main.transcript.query(ToolCard) if c.call.name == "Edit"][0]
        assert str(edit.header_text()).startswith("⊘ Edit")


async def test_a_request_to_the_demo_model_that_names_a_file_is_told_it_was_not_opened(
    repo: Path, replay_file, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo answers from the message alone: naming calc.py gets that said, next to the answer."""
    import app.app as app_module
    from models.replay import ReplayModel

    path = replay_file("calc.py is a Bash script.")
    model = ReplayModel(path)
    model.info = model.info.model_copy(update={"path": f"/cache/{EMBEDDED_NAME}.Q8_0.abc.gguf"})
    monkeypatch.setattr(app_module, "load_model", lambda spec, context, engine: model)
    app = app_module.make_app(repo, None)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert "answers from your message alone" in notices(app)[0]
        await send(pilot, "what does calc.py do?")
        await idle(pilot)
        await wait_for(pilot, lambda: any("does not open calc.py" in n for n in notices(app, "warning")), what="note")
        await send(pilot, "say hello")
        await idle(pilot)
        assert sum("does not open" in n for n in notices(app)) == 1  # only a request that names a file
