"""Pilot-driven tests of the TUI against a replay model and a real temporary git repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.core.events import ExternalChangeEvent, PrefillEvent
from agent.paths import project_state
from app.screens.bash import BashApprovalScreen
from app.screens.review import EditReviewScreen
from app.screens.session_diff import SessionDiffScreen
from app.widgets.transcript import AssistantText, Notice, ReasoningBlock, ToolCard, UserMessage
from tests.conftest import xml_call
from tests.tui.conftest import SIZE, idle, ready, send, wait_for

pytestmark = pytest.mark.anyio

FIX_ADD = xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b")
READ_CALC = xml_call("Read", file_path="calc.py")


def tool_messages(app) -> list[str]:  # type: ignore[no-untyped-def]
    return [m.content for m in app.workspace.session.messages if m.role == "tool"]


def notices(app, level: str | None = None) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(n.render()) for n in app.main.transcript.query(Notice) if level is None or n.level == level]


async def test_approve_edit(tui_app, repo: Path) -> None:
    app = tui_app("<think>calc.py subtracts.</think>Reading.\n" + READ_CALC, "Fixing.\n" + FIX_ADD, "Fixed.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "fix add")
        review = await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen) and app.screen, what="review")
        assert review.request.path == "calc.py"
        assert [h.added for h in review.request.hunks] == [1]
        await pilot.press("y")
        await idle(pilot)
        assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
        assert any(m.startswith("Edited calc.py") for m in tool_messages(app))
        cards = list(app.main.transcript.query(ToolCard))
        assert [c.call.name for c in cards] == ["Read", "Edit"]
        assert not any(c.is_error for c in cards)
        # Reasoning was streamed into its own block and folded when the turn ended.
        blocks = list(app.main.transcript.query(ReasoningBlock))
        assert len(blocks) == 1 and blocks[0].collapsed
        assert [line.text.strip() for line in blocks[0].lines_for(100)] == ["▶ Thought (2 words)"]
        await pilot.click(blocks[0])  # opens it again
        assert not blocks[0].collapsed
        assert "calc.py subtracts." in " ".join(line.text for line in blocks[0].lines_for(100))
        assert "Fixed." in app.main.transcript.query(AssistantText).last().text_so_far
        assert app.main.status.step == 3


async def test_reject_with_reason(tui_app, repo: Path) -> None:
    before = (repo / "calc.py").read_bytes()
    app = tui_app(READ_CALC, FIX_ADD, "OK, leaving it.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "fix add")
        await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen), what="review")
        await pilot.press("n")
        await pilot.press(*"keep subtraction")
        await pilot.press("enter")
        await idle(pilot)
        assert (repo / "calc.py").read_bytes() == before
        rejected = [m for m in tool_messages(app) if "rejected" in m]
        assert rejected == ["The user rejected the change to calc.py; nothing was written. Their reason: keep subtraction"]
        assert [c.call.name for c in app.main.transcript.query(ToolCard)] == ["Read", "Edit"]


async def test_partial_hunk_approval(tui_app, repo: Path) -> None:
    lines = [f"line {i}\n" for i in range(1, 21)]
    (repo / "long.txt").write_text("".join(lines))
    new = list(lines)
    new[1], new[17] = "LINE 2\n", "LINE 18\n"
    write = xml_call("Write", file_path="long.txt", content="".join(new))
    app = tui_app(xml_call("Read", file_path="long.txt"), write, "Done.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "shout two lines")
        review = await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen) and app.screen, what="review")
        assert len(review.request.hunks) == 2
        await pilot.press("space")  # skip hunk 1 (the cursor starts on it)
        await pilot.press("j")  # hunk 2 stays selected
        assert review.cursor == 1
        assert review.selected_hunks() == [1]
        await pilot.press("y")
        await idle(pilot)
        text = (repo / "long.txt").read_text()
        assert "line 2\n" in text and "LINE 2\n" not in text
        assert "LINE 18\n" in text
        assert "The user applied only hunk(s) 2 of 2 to long.txt" in tool_messages(app)[-1]


async def test_bash_approval_with_prefix_rule(tui_app, repo: Path) -> None:
    app = tui_app(
        xml_call("Bash", command="touch first.txt"),
        xml_call("Bash", command="touch second.txt"),
        "Both made.",
    )
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        sandboxed = app.workspace.runner.sandboxed
        await send(pilot, "make two files")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, BashApprovalScreen) and app.screen, what="bash")
        assert dialog.request.command == "touch first.txt"
        assert dialog.request.cwd == "."
        assert dialog.request.sandboxed == sandboxed
        assert dialog.prefix == "touch"
        await pilot.press("p")
        await pilot.pause(0.1)
        # The remembered prefix runs without asking, but read-only: `touch` tries to write, fails, and
        # only then asks whether it may (without a sandbox every command asks, whatever the list says).
        second = await wait_for(pilot, lambda: isinstance(app.screen, BashApprovalScreen) and app.screen, what="second question")
        assert second.request.command == "touch second.txt"
        assert second.request.tried_to_write == sandboxed
        if sandboxed:
            assert not (repo / "second.txt").exists()  # the read-only run changed nothing
        await pilot.press("y")
        await idle(pilot)
        assert (repo / "first.txt").exists() and (repo / "second.txt").exists()
        stored = json.loads((project_state(repo) / "allow.json").read_text())
        assert stored["allow"] == ["touch"]
        # The rule is per project and persists: a new session on this repo allows `touch` too.
        assert app.workspace.session.approvals.policy.allow.allows("touch third.txt")


async def test_escape_stops_streaming_and_session_goes_on(tui_app, repo: Path) -> None:
    long_text = " ".join(f"word{i}" for i in range(400))
    app = tui_app(long_text, "Second answer.", delay=0.02)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "talk a lot")
        await wait_for(
            pilot, lambda: app.main.transcript.query(AssistantText) and "word5" in
            app.main.transcript.query(AssistantText).last().text_so_far, what="streaming",
        )
        await pilot.press("escape")
        await idle(pilot)
        streamed = app.main.transcript.query(AssistantText).first().text_so_far
        assert "word399" not in streamed
        assert any("stopped by the user" in n for n in notices(app, "warning"))
        await send(pilot, "go on")
        await idle(pilot)
        assert "Second answer." in app.main.transcript.query(AssistantText).last().text_so_far
        assert [str(u.render()) for u in app.main.transcript.query(UserMessage)] == ["talk a lot", "go on"]


async def test_undo_reverts_last_applied_change(tui_app, repo: Path) -> None:
    before = (repo / "calc.py").read_text()
    app = tui_app(READ_CALC, FIX_ADD, "Fixed.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "fix add")
        await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen), what="review")
        await pilot.press("y")
        await idle(pilot)
        assert (repo / "calc.py").read_text() != before
        await send(pilot, "/undo")
        await wait_for(pilot, lambda: any("undid" in n for n in notices(app)), what="undo notice")
        assert (repo / "calc.py").read_text() == before
        await send(pilot, "/undo")
        await wait_for(pilot, lambda: any("nothing to undo" in n for n in notices(app, "error")), what="refusal")


async def test_undo_leaves_what_a_command_outside_the_overlay_changed_until_undo_uncertain(tui_app, repo: Path) -> None:
    """--no-sandbox: a command's files are uncertain (the user's own edits made meanwhile look the same):
    /undo names them and leaves them; /undo uncertain, right after, takes them back."""
    app = tui_app(xml_call("Bash", command="echo built > out.txt"), "Done.", mode="full-auto", no_sandbox=True)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "build")
        await idle(pilot)
        assert (repo / "out.txt").read_text() == "built\n"
        await send(pilot, "/undo")
        await wait_for(pilot, lambda: any("cannot tell" in n for n in notices(app)), what="undo notice")
        assert (repo / "out.txt").exists()  # left
        await send(pilot, "/undo sideways")
        await wait_for(pilot, lambda: any("/undo uncertain" in n for n in notices(app, "error")), what="bad argument")
        await send(pilot, "/undo uncertain")
        await wait_for(pilot, lambda: not (repo / "out.txt").exists(), what="out.txt taken back")


async def test_session_diff_lists_changed_files(tui_app, repo: Path) -> None:
    app = tui_app(READ_CALC, FIX_ADD, xml_call("Write", file_path="notes.md", content="# notes\n"), "Done.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "fix and note")
        await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen), what="review 1")
        await pilot.press("a")  # approve this and all further edits: auto-edit
        await idle(pilot)
        assert app.workspace.session.approvals.policy.mode == "auto-edit"
        assert app.main.status.mode == "auto-edit"
        assert (repo / "notes.md").read_text() == "# notes\n"
        await send(pilot, "/diff")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, SessionDiffScreen) and app.screen, what="/diff")
        assert [path for path, _ in screen.files] == ["calc.py", "notes.md"]
        assert "+    return a + b" in screen.files[0][1]
        await pilot.press("escape")
        assert not isinstance(app.screen, SessionDiffScreen)


async def test_prompt_history_newline_and_completion(tui_app) -> None:
    app = tui_app("One.", "Two.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        prompt = app.main.prompt
        await send(pilot, "first")
        await idle(pilot)
        prompt.insert("line one")
        await pilot.press("ctrl+j")
        prompt.insert("line two")
        assert prompt.text == "line one\nline two"
        prompt.clear()
        await pilot.press("up")
        assert prompt.text == "first"
        await pilot.press("down")
        assert prompt.text == ""
        prompt.insert("/he")
        await pilot.pause()
        assert app.main.query_one("#hints").display
        await pilot.press("tab")
        assert prompt.text == "/help"
        await pilot.press("enter")
        await wait_for(pilot, lambda: any("/undo" in n for n in notices(app)), what="help")
        await send(pilot, "/mode auto-edit")
        await wait_for(pilot, lambda: app.main.status.mode == "auto-edit", what="mode switch")
        assert app.workspace.session.approvals.policy.mode == "auto-edit"
        await send(pilot, "/nonsense")
        await wait_for(pilot, lambda: any("unknown command" in n for n in notices(app, "error")), what="error")


async def test_status_bar_counts_prefill_and_external_changes(tui_app) -> None:
    app = tui_app("Hi.")
    async with app.run_test(size=(160, 36)) as pilot:  # room for every field (narrower: the 80x24 test)
        await ready(pilot)
        status = app.main.status
        app.bridge.sink(PrefillEvent(done=512, total=2048))
        app.bridge.sink(ExternalChangeEvent(paths=["a.py", "b.py"]))
        app.bridge.sink(ExternalChangeEvent(paths=["a.py"]))
        await wait_for(pilot, lambda: status.external_changes == 2, what="external count")
        rendered = str(status.render())
        assert "reading prompt 25% (512/2048)" in rendered
        assert "2 changed outside" in rendered
        assert "replay:replay.jsonl" in rendered and "step 0/150" in rendered


async def test_status_bar_says_the_context_grows(tui_app) -> None:
    from agent.core.events import ContextEvent

    app = tui_app("Hi.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        status = app.main.status
        app.bridge.sink(ContextEvent(before=4096, to=8192, seconds=0.2))
        await wait_for(pilot, lambda: status.context_allocated == 8192, what="the growth")
        assert "/8.2k (grows to 131k)" in str(status.render())


async def test_first_run_says_how_to_use_frognano(repo: Path, replay_file, monkeypatch) -> None:
    import app.app as app_module
    from models.replay import ReplayModel

    path = replay_file("Hello.")
    monkeypatch.setattr(app_module, "load_model", lambda spec, context, engine: ReplayModel(path))
    app = app_module.make_app(repo, None)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        first = notices(app)[0]
        assert "does not use the tools" in first and "--model" in first and "ribbit quantize" in first
        assert "\n" not in first


async def test_ctrl_c_twice_quits(tui_app) -> None:
    app = tui_app("Hi.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.is_running
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_code == 0


async def test_tool_card_folds_long_results(tui_app, repo: Path) -> None:
    (repo / "big.txt").write_text("".join(f"row {i}\n" for i in range(30)))
    app = tui_app(xml_call("Read", file_path="big.txt"), xml_call("Read", file_path="missing.txt"), "Done.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "read")
        await idle(pilot)
        good, bad = list(app.main.transcript.query(ToolCard))
        assert "26 more lines" in str(good.body_text())
        assert len(good.lines_for(100)) == 1 + 4 + 1  # the call, four lines, the fold note
        good.action_toggle()
        await pilot.pause()
        assert "row 29" in str(good.body_text())
        assert len(good.lines_for(100)) == 1 + 30
        assert bad.is_error and bad.has_class("error")


async def test_escape_stops_a_running_tool(tui_app) -> None:
    app = tui_app(xml_call("Bash", command="sleep 30"), "Never reached.", mode="full-auto", no_sandbox=True)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "wait a long time")
        await wait_for(pilot, lambda: app.main.transcript.cards, what="the Bash card")
        await pilot.pause(0.3)
        await pilot.press("escape")
        await idle(pilot)
        card = next(iter(app.main.transcript.cards.values()))
        assert "Command stopped by the user" in (card.output or "")
        assert any("stopped by the user" in n for n in notices(app, "warning"))
        assert not app.busy


async def test_model_command_switches_models_and_the_conversation_goes_on(tui_app, replay_file, tmp_path: Path) -> None:
    app = tui_app("First model here.")
    other = replay_file(READ_CALC, "Second model: calc.py read.", name="other.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "hello")
        await idle(pilot)

        await send(pilot, f"/model {tmp_path / 'missing.gguf'}")
        await wait_for(pilot, lambda: any(n.startswith("✗ /model:") for n in notices(app, "error")), what="error")
        assert app.main.status.model_name.endswith("replay.jsonl")  # still the first model

        await send(pilot, f"/model replay:{other}")
        await wait_for(pilot, lambda: app.main.status.model_name == "replay:other.jsonl", what="the switch")
        await send(pilot, "read calc.py")
        await idle(pilot)
        session = app.workspace.session
        assert [m.content for m in session.messages if m.role == "user"] == ["hello", "read calc.py"]
        assert session.messages[2].content == "First model here."  # the earlier turn is kept
        assert any(m.role == "tool" and "return a - b" in m.content for m in session.messages)
        texts = [t.text_so_far for t in app.main.transcript.query(AssistantText)]
        assert texts[0] == "First model here." and texts[-1] == "Second model: calc.py read."


async def test_the_transcript_names_files_that_run_code_later(tui_app, repo: Path) -> None:
    """Issue 28: at the end of the task the transcript pane names the changed Makefile, not notes.txt."""
    app = tui_app(
        xml_call("Write", file_path="Makefile", content="all:\n\techo hi\n"),
        xml_call("Write", file_path="notes.txt", content="plain\n"), "Done.", mode="auto-edit",
    )
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "add a makefile")
        review = await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen) and app.screen, what="review")
        assert review.request.path == "Makefile" and review.request.runs_later  # auto-edit asks for this one
        await pilot.press("y")
        await idle(pilot)
        assert (repo / "Makefile").exists() and (repo / "notes.txt").exists()
        later = [n for n in notices(app, "warning") if "run code on your machine later" in n]
        assert len(later) == 1 and "Makefile" in later[0] and "notes.txt" not in later[0]


async def test_quitting_while_the_prompt_is_read_fails_nothing(tui_app, monkeypatch) -> None:
    """The preload worker finishes while the app shuts down: its figure for the status bar must not crash
    the app on the way out (it once looked the status bar up from its own thread, and found none)."""
    import time

    from agent.session import Workspace

    app = tui_app("Hi.")
    counted = Workspace.prompt_tokens

    def slow_count(self: Workspace) -> int:
        deadline = time.monotonic() + 5
        while app.main.children and time.monotonic() < deadline:  # until the screen's widgets are gone
            time.sleep(0.001)
        return counted(self)

    monkeypatch.setattr(Workspace, "prompt_tokens", slow_count)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
    assert app.return_code in (0, None)


async def test_a_save_while_the_diff_waits_is_kept_and_the_new_diff_shown(tui_app, repo: Path) -> None:
    """Issue 40: the user's editor saves the file while the diff is on screen; `y` applies the edit to
    what is on disk now, after showing the new diff, and the user's line is kept."""
    app = tui_app("Reading.\n" + READ_CALC, "Fixing.\n" + FIX_ADD, "Fixed.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "fix add")
        first = await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen) and app.screen, what="review")
        with open(repo / "calc.py", "a") as editor:
            editor.write("# mine\n")
        await pilot.press("y")
        second = await wait_for(
            pilot, lambda: isinstance(app.screen, EditReviewScreen) and app.screen is not first and app.screen,
            what="the review again",
        )
        assert "# mine" in second.request.diff
        await pilot.press("y")
        await idle(pilot)
        assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n# mine\n"
        assert any("changed while the change waited" in m for m in tool_messages(app))
        # /undo takes back the agent's change and only it: the version the user saved comes back.
        await send(pilot, "/undo")
        await idle(pilot)
        assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n# mine\n"
