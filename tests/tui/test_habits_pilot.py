"""The habits of daily use in the TUI: `@file`, `!command`, the user's own slash commands and `/commit`,
against a replay model that records every prompt it is given and a real temporary git repository."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import TextArea

from app.app import make_app
from app.screens.commit import CommitScreen
from app.widgets.prompt import CommandHints
from app.widgets.transcript import Notice
from models.base import Chunk, GenerationRequest
from models.chat import ChatMessage
from models.replay import ReplayModel
from tests.conftest import git, xml_call
from tests.tui.conftest import SIZE, idle, ready, send, wait_for

pytestmark = pytest.mark.anyio

FILE_LINE = "     2\t    return a - b"


class RecordingReplay(ReplayModel):
    """The replay model, keeping the messages of every prompt it was asked to continue."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.prompts: list[list[ChatMessage]] = []

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        self.prompts.append([m.model_copy() for m in request.messages])
        return super().generate(request)


def notices(app, level: str | None = None) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(n.render()) for n in app.main.transcript.query(Notice) if level is None or n.level == level]


def hints(app) -> str:  # type: ignore[no-untyped-def]
    widget = app.main.query_one(CommandHints)
    return str(widget.render()) if widget.display else ""


def assert_append_only(prompts: list[list[ChatMessage]]) -> None:
    """Each prompt extends the one before it: nothing the model read is changed or read again."""
    for earlier, later in zip(prompts, prompts[1:]):
        assert later[: len(earlier)] == earlier


async def test_at_file_completion_and_attachment(repo: Path, replay_file) -> None:  # type: ignore[no-untyped-def]
    model = RecordingReplay(replay_file("It subtracts.", "Still subtracts."))
    app = make_app(repo, model)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        app.main.prompt.focus()
        await pilot.press(*"explain @cal")
        await wait_for(pilot, lambda: "@calc.py" in hints(app), what="the @ completion")
        await pilot.press("tab")
        assert app.main.prompt.text == "explain @calc.py "
        await pilot.press("enter")
        await idle(pilot)
        first = model.prompts[0][-1]
        assert first.role == "user" and first.content.startswith("explain @calc.py")
        assert first.content.count(FILE_LINE) == 1
        assert any(n.startswith("attached: calc.py (2 lines)") for n in notices(app))
        # A resumed or rewound transcript shows the prompt as typed and names what went with it.
        from app.commands import typed_part

        assert typed_part(first.content) == "explain @calc.py\n(+ 1 attachment, as the model read them)"
        await send(pilot, "and now?")
        await idle(pilot)
        assert_append_only(model.prompts)
        assert sum(m.content.count(FILE_LINE) for m in model.prompts[-1]) == 1  # entered once, never again


async def test_at_outside_the_repository_is_refused(repo: Path, replay_file, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (repo.parent / "outside.txt").write_text("a secret\n")
    model = RecordingReplay(replay_file("Never asked."))
    app = make_app(repo, model)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "read @../outside.txt")
        await idle(pilot)
        errors = notices(app, "error")
        assert any("not sent: @../outside.txt" in e and "outside the repository" in e for e in errors)
        assert model.prompts == []  # the model was never asked
        assert [m.role for m in app.workspace.conversation()] == []
        assert app.main.prompt.text == "read @../outside.txt"  # back in the prompt, to be fixed


async def test_bang_pytest_output_in_transcript_and_conversation(
    repo: Path, replay_file, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    model = RecordingReplay(replay_file("add subtracts."))
    app = make_app(repo, model)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "!pytest -q -p no:cacheprovider")
        await idle(pilot)
        shown = [n for n in notices(app) if n.startswith("! $ pytest -q") or n.startswith("$ pytest -q")]
        assert shown and "1 failed" in shown[0] and "exit code 1" in shown[0]
        assert model.prompts == []  # the model reads it with the next prompt, not before
        await send(pilot, "why does it fail?")
        await idle(pilot)
        task = model.prompts[0][-1].content
        assert task.startswith("why does it fail?")
        assert "The user ran `pytest -q -p no:cacheprovider` in the repository (exit code 1)" in task
        assert "1 failed" in task and "assert -1 == 5" in task


async def test_bang_changes_are_the_users_and_esc_stops_one(repo: Path, replay_file) -> None:  # type: ignore[no-untyped-def]
    fix = xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b")
    app = make_app(repo, RecordingReplay(replay_file(xml_call("Read", file_path="calc.py"), fix, "Fixed.")),
                   mode="auto-edit")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "fix add")
        await idle(pilot)
        await send(pilot, "!printf 'mine\\n' > mine.txt && printf '# the user was here\\n' >> calc.py")
        await idle(pilot)
        assert (repo / "mine.txt").read_text() == "mine\n"
        await send(pilot, "/undo")
        # /undo means the agent's last change (the Edit), which the user's command changed after: refused,
        # and the user's file and line stay.
        await wait_for(pilot, lambda: any("undo:" in n for n in notices(app, "error")), what="undo")
        assert any("calc.py changed after the agent's change" in n for n in notices(app, "error"))
        assert (repo / "mine.txt").read_text() == "mine\n"
        assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n# the user was here\n"
        (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")  # the user takes their line out
        await send(pilot, "/undo")
        await wait_for(pilot, lambda: any(n.startswith("undid step") for n in notices(app)), what="the second undo")
        assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
        assert (repo / "mine.txt").read_text() == "mine\n"  # never taken back
        await send(pilot, "!sleep 30; echo never")
        await wait_for(pilot, lambda: app.busy, what="the command to start")
        await pilot.pause(0.3)
        await pilot.press("escape")
        await idle(pilot)
        stopped = [n for n in notices(app) if "$ sleep 30" in n]
        assert stopped and "stopped by the user" in stopped[0] and "never" not in stopped[0].split("\n", 1)[1]


async def test_custom_command_with_arguments(repo: Path, replay_file) -> None:  # type: ignore[no-untyped-def]
    folder = repo / ".ribbit" / "commands"
    folder.mkdir(parents=True)
    (folder / "explain.md").write_text("---\ndescription: Explain a file\n---\nExplain $1 in at most $2 words.\n")
    model = RecordingReplay(replay_file("It adds, badly."))
    app = make_app(repo, model)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        app.main.prompt.focus()
        await pilot.press(*"/expl")
        await wait_for(pilot, lambda: "/explain" in hints(app), what="the command in completion")
        assert "Explain a file (project)" in hints(app)
        app.main.prompt.text = ""
        await send(pilot, "/help")
        await wait_for(pilot, lambda: any("/explain" in n for n in notices(app)), what="/help")
        assert any("/commit" in n and "/explain" in n and "Explain a file" in n for n in notices(app))
        await send(pilot, "/explain calc.py 12")
        await idle(pilot)
        assert model.prompts[0][-1].content == "Explain calc.py in at most 12 words."


async def test_commit_with_an_edited_message(repo: Path, replay_file) -> None:  # type: ignore[no-untyped-def]
    fix = xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b")
    model = RecordingReplay(replay_file(xml_call("Read", file_path="calc.py"), fix, "Fixed.", "Fix add"))
    # The user's own work, before the session: a new file staged, an edit not staged.
    (repo / "NOTES.md").write_text("my notes\n")
    git(repo, "add", "NOTES.md")
    (repo / "test_calc.py").write_text((repo / "test_calc.py").read_text() + "# mine, not staged\n")
    app = make_app(repo, model, mode="auto-edit")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "/commit")
        await wait_for(pilot, lambda: any("nothing to commit" in n for n in notices(app)), what="nothing to commit")
        await send(pilot, "fix add")
        await idle(pilot)
        await send(pilot, "/mode plan")
        await send(pilot, "/commit")
        await wait_for(pilot, lambda: any("not available in plan mode" in n for n in notices(app)), what="plan refusal")
        await send(pilot, "/mode auto-edit")
        await send(pilot, "/commit")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, CommitScreen) and app.screen, what="the dialog")
        assert dialog.message == "Fix add"
        request = model.prompts[-1][-1].content
        assert "- init" in request and "calc.py" in request and "+    return a + b" in request
        dialog.query_one(TextArea).text = "Make add add\n\nIt subtracted."
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: any(n.startswith("committed ") for n in notices(app)), what="the commit")
        assert git(repo, "log", "-1", "--format=%B").strip() == "Make add add\n\nIt subtracted."
        assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["calc.py"]
        head = git(repo, "rev-parse", "--short=12", "HEAD").strip()
        assert any(n.startswith(f"committed {head}") for n in notices(app))
        porcelain = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True,
                                   check=True).stdout.splitlines()
        assert sorted(porcelain) == [" M test_calc.py", "A  NOTES.md"]


async def test_a_toy_slash_command_is_one_table_row(tui_app, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from app import commands

    seen: list[str] = []

    async def toy(app, arg: str) -> None:  # type: ignore[no-untyped-def]
        seen.append(arg)
        await app.main.transcript.add_notice(f"toy says {arg}")

    monkeypatch.setitem(commands.BUILTIN, "/toy", commands.SlashCommand("/toy", "a toy command", toy, args=("loud",)))
    app = tui_app("Unused.")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        app.main.prompt.focus()
        await pilot.press(*"/to")
        await wait_for(pilot, lambda: "/toy" in hints(app) and "a toy command" in hints(app), what="completion")
        await pilot.press("tab")
        assert app.main.prompt.text == "/toy "
        await pilot.press(*"lo", "tab")
        assert app.main.prompt.text == "/toy loud"
        await pilot.press("enter")
        await wait_for(pilot, lambda: seen == ["loud"], what="the handler")
        await send(pilot, "/help")
        await wait_for(pilot, lambda: any("/toy" in n and "a toy command" in n for n in notices(app)), what="/help")


async def test_a_project_command_cannot_ask_for_less_care(repo: Path, replay_file) -> None:  # type: ignore[no-untyped-def]
    folder = repo / ".ribbit" / "commands"
    folder.mkdir(parents=True)
    (folder / "yolo.md").write_text("---\nmode: full-auto\n---\nDelete the tests.\n")
    (folder / "planfix.md").write_text("---\nmode: plan\n---\nPlan a fix for $ARGUMENTS.\n")
    model = RecordingReplay(replay_file("A plan.", "Unused."))
    app = make_app(repo, model)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "/yolo")
        await wait_for(pilot, lambda: any("asks for full-auto mode" in n for n in notices(app, "error")), what="refusal")
        assert app.workspace.mode == "ask" and model.prompts == []
        await send(pilot, "/planfix add")
        await idle(pilot)
        assert app.workspace.mode == "plan"
        assert model.prompts[0][-1].content.startswith("Plan a fix for add.")


async def test_commit_cancelled_with_esc_commits_nothing(repo: Path, replay_file) -> None:  # type: ignore[no-untyped-def]
    fix = xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b")
    app = make_app(repo, RecordingReplay(replay_file(xml_call("Read", file_path="calc.py"), fix, "Fixed.", "Fix add")),
                   mode="auto-edit")
    before = git(repo, "rev-parse", "HEAD")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "fix add")
        await idle(pilot)
        await send(pilot, "/commit")
        await wait_for(pilot, lambda: isinstance(app.screen, CommitScreen), what="the dialog")
        await pilot.press("escape")
        await wait_for(pilot, lambda: any("cancelled; nothing was committed" in n for n in notices(app)), what="cancel")
        assert git(repo, "rev-parse", "HEAD") == before
        assert not app.busy


def test_completion_quotes_a_path_with_spaces() -> None:
    from agent.session.mentions import mentions
    from app.widgets.prompt import completion_at

    found = completion_at("see @my", 7, {}, {}, lambda query: ["my notes.txt", "my_file.py"])
    assert found is not None and found.options == ['@"my notes.txt"', "@my_file.py"]
    assert mentions('see @"my notes.txt" and @my_file.py') == ["my notes.txt", "my_file.py"]
