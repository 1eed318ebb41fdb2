"""`!command` through the session API: the user's environment (or the sandbox, when sandbox.toml says so),
the journal recording its changes as the user's, and its output waiting for the next prompt."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.session import RejectAll, open_workspace
from agent.session.workspace import Workspace
from models.replay import ReplayModel


def workspace(repo: Path, replay_file, **kwargs: object) -> Workspace:  # type: ignore[no-untyped-def]
    model = ReplayModel(replay_file("Done."))
    return open_workspace(model, repo, mode="auto-edit", approver=RejectAll(), sink=lambda e: None, **kwargs)  # type: ignore[arg-type]


def test_user_command_runs_as_the_user_and_undo_keeps_its_changes(
    repo: Path, replay_file, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.setenv("RIBBIT_TEST_USER_TOKEN", "users-own-value")
    ws = workspace(repo, replay_file)
    try:
        result = ws.run_user_command("echo token=$RIBBIT_TEST_USER_TOKEN; echo made > made.txt; exit 3")
        assert result.exit_code == 3 and "token=users-own-value" in result.output
        assert (repo / "made.txt").read_text() == "made\n"
        assert ws.handed == ["The user ran `echo token=$RIBBIT_TEST_USER_TOKEN; echo made > made.txt; exit 3` in the "
                             "repository (exit code 3); its output:\ntoken=users-own-value"]
        assert "made.txt" not in ws.journal.agent_changed
        undone = ws.undo_last()
        assert undone.kept == ["made.txt"] and undone.restored == [] and undone.deleted == []
        assert (repo / "made.txt").read_text() == "made\n"
        ws.clear()
        assert ws.handed == []  # a new conversation starts without it
    finally:
        ws.close()


def test_user_command_in_the_sandbox_when_the_settings_say_so(
    repo: Path, replay_file, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    settings = Path(os.environ["XDG_CONFIG_HOME"]) / "ribbit" / "sandbox.toml"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text("bang_sandbox = true\n")
    monkeypatch.setenv("RIBBIT_TEST_USER_TOKEN", "users-own-value")
    ws = workspace(repo, replay_file)
    try:
        assert ws.bang_sandbox and ws.sandboxed
        result = ws.run_user_command("echo token=[$RIBBIT_TEST_USER_TOKEN]; echo made > made.txt")
        assert result.exit_code == 0 and "token=[]" in result.output  # the sandbox's environment, not the user's
        assert (repo / "made.txt").read_text() == "made\n"  # the repository is writable, as for the user
        assert "made.txt" not in ws.journal.agent_changed
    finally:
        ws.close()


def test_attachments_must_leave_room_in_the_context(repo: Path, replay_file) -> None:  # type: ignore[no-untyped-def]
    from agent.session import Limits, MentionRefused

    for n in range(4):
        (repo / f"part{n}.txt").write_text("".join(f"line {i} of part {n}, some words\n" for i in range(400)))
    ws = workspace(repo, replay_file, limits=Limits(context=8192, tool_output_tokens=2000))
    try:
        assert len(ws.attachments("@part0.txt")) == 1
        with pytest.raises(MentionRefused, match="more than half the context"):
            ws.attachments("@part0.txt @part1.txt @part2.txt @part3.txt")
    finally:
        ws.close()


def test_a_long_output_is_paged_like_bash_and_saved_for_read(repo: Path, replay_file) -> None:  # type: ignore[no-untyped-def]
    import re

    from agent.session import Limits

    ws = workspace(repo, replay_file, limits=Limits(tool_output_tokens=300))
    try:
        ws.run_user_command("seq 1 5000")
        handed = ws.handed[-1]
        assert handed.startswith("The user ran `seq 1 5000` in the repository (exit code 0)")
        assert "\n1\n2\n" in handed and handed.endswith("\n5000") and "\n2500\n" not in handed
        saved = re.search(r'Read file_path="([^"]+)" offset=(\d+)', handed)
        assert saved is not None
        shown = ws.session.run_tool(_read_call(saved.group(1), int(saved.group(2))))
        assert not shown[1] and f"\t{saved.group(2)}\n" in shown[0]
    finally:
        ws.close()


def _read_call(path: str, offset: int):  # type: ignore[no-untyped-def]
    from models.chat import ToolCall

    return ToolCall(id="r1", name="Read", arguments={"file_path": path, "offset": offset, "limit": 3})
