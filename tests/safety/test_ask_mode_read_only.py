"""Issue 12, hole 3: in ask and auto-edit a command runs without a question only if it cannot write.

Allow-listed commands (defaults and the user's "always allow" prefixes) run with the repository
read-only in the real bubblewrap sandbox; one that tries to write is stopped by the kernel, and runs
with write access only after the user says yes. Outcomes are checked on disk and in what the model got.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.paths import project_state
from tests.conftest import git, tree_bytes, xml_call
from tests.functional.helpers import ribbit_run
from tests.safety.helpers import tool_outputs
from tests.safety.sandbox_helpers import ScriptedApprover, session

WRITERS = [
    # Each is on the default allow list, and each writes or deletes through an option.
    "git diff --output=calc.py HEAD~0",
    "find . -name notes.txt -delete",
    "find . -name calc.py -fprintf made.txt %p",
    "git log --output=test_calc.py",
    "grep -r add . --include=*.py",  # control: reads only, no question
]


@pytest.fixture
def work(repo: Path) -> Path:
    (repo / "notes.txt").write_text("my notes\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-q", "-m", "notes")
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b  # the user's uncommitted fix\n")
    return repo


@pytest.mark.parametrize("mode", ["ask", "auto-edit"])
def test_allow_listed_commands_cannot_write_delete_or_create(work: Path, tmp_path: Path, mode: str) -> None:
    before = tree_bytes(work)
    turns = [xml_call("Bash", command=c) for c in WRITERS]
    workspace, recorder, approver = session(work, tmp_path, *turns, "done", mode=mode, approver=ScriptedApprover())
    assert tree_bytes(work) == before  # nothing overwritten, deleted or created
    assert not (work / "made.txt").exists() and (work / "notes.txt").read_text() == "my notes\n"
    # No question before any of them; afterwards one per command that tried to write.
    asked = approver.bash_requests()
    assert [r.command for r in asked] == WRITERS[:4]
    assert all(r.tried_to_write and r.access == "read-write" for r in asked)
    outputs = tool_outputs(recorder)
    for output in outputs[:4]:
        assert "read-only" in output and "nothing was changed" in output and "did not allow" in output
    assert "calc.py" in outputs[4] and "read-only" not in outputs[4]  # the read went through, unasked


def test_the_attack_from_the_issue_rejected_edit_then_git_diff_output(work: Path, tmp_path: Path) -> None:
    """The user rejects an Edit to calc.py; an allow-listed `git diff --output=calc.py` must not undo that."""
    fixed = (work / "calc.py").read_bytes()
    turns = [
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a + b", new_string="a * b"),
        xml_call("Bash", command="git diff --output=calc.py"),
        "done",
    ]
    approver = ScriptedApprover(False, False)  # no to the edit, no to letting git write
    workspace, recorder, _ = session(work, tmp_path, *turns, mode="ask", approver=approver)
    assert (work / "calc.py").read_bytes() == fixed
    assert [r.kind for r in approver.requests] == ["edit", "bash"]
    assert "read-only" in tool_outputs(recorder)[2]


def test_a_writing_command_runs_once_the_user_says_yes(work: Path, tmp_path: Path) -> None:
    turns = [
        xml_call("Bash", command="find . -name notes.txt -delete"),  # allow-listed: read-only, then asks
        xml_call("Bash", command="touch made.txt"),  # not allow-listed: asks first, then writable
        "done",
    ]
    workspace, recorder, approver = session(work, tmp_path, *turns, mode="ask", approver=ScriptedApprover(True, True))
    assert not (work / "notes.txt").exists() and (work / "made.txt").exists()
    first, second = approver.bash_requests()
    assert first.tried_to_write and not second.tried_to_write and second.access == "read-write"
    assert "read-only" not in tool_outputs(recorder)[0]  # the model sees the real run's result
    assert [e.decision for e in recorder.of_type("approval")] == ["approved", "approved"]  # type: ignore[attr-defined]


def test_user_added_prefixes_run_read_only_too(work: Path, tmp_path: Path) -> None:
    store = project_state(work) / "allow.json"
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps({"allow": ["python3", "touch", "rm"]}))
    before = tree_bytes(work)
    turns = [
        xml_call("Bash", command="python3 -m zipfile -c calc.py test_calc.py"),  # overwrites calc.py
        xml_call("Bash", command="touch new.txt"),
        xml_call("Bash", command="rm -f notes.txt"),
        "done",
    ]
    workspace, recorder, approver = session(work, tmp_path, *turns, mode="ask")
    assert tree_bytes(work) == before
    assert [r.tried_to_write for r in approver.bash_requests()] == [True, True, True]


def test_pressing_p_remembers_a_read_only_prefix(work: Path, tmp_path: Path) -> None:
    from agent.core.approvals import ApprovalDecision

    turns = [
        xml_call("Bash", command="sort calc.py"),
        xml_call("Bash", command="sort -o calc.py test_calc.py"),  # the remembered prefix, writing
        "done",
    ]
    before = tree_bytes(work)
    # `sort` is not on the default list: asked once, "always allow" pressed; then it runs unasked, read-only.
    approver = ScriptedApprover(ApprovalDecision(approved=True, remember="prefix"), False)
    workspace, recorder, _ = session(work, tmp_path, *turns, mode="ask", approver=approver)
    assert json.loads((project_state(work) / "allow.json").read_text())["allow"] == ["sort"]
    assert tree_bytes(work) == before
    assert [r.tried_to_write for r in approver.bash_requests()] == [False, True]


def test_full_auto_keeps_a_writable_repository(work: Path, tmp_path: Path) -> None:
    turns = [xml_call("Bash", command="find . -name notes.txt -delete"), "done"]
    _, _, approver = session(work, tmp_path, *turns, mode="full-auto")
    assert not (work / "notes.txt").exists() and approver.requests == []


def test_the_journal_records_the_writable_step(work: Path, tmp_path: Path) -> None:
    turns = [xml_call("Bash", command="ls"), xml_call("Bash", command="touch made.txt"), "done"]
    workspace, _, _ = session(work, tmp_path, *turns, mode="ask", approver=ScriptedApprover(True))
    labels = [git(work, "log", "-1", "--format=%s", sha).strip() for sha in workspace.journal.snapshots]
    assert len(labels) == 2 and "made.txt" in workspace.patch()  # start, and the writable step only


def test_ribbit_run_asks_on_stdin_when_a_read_only_command_tried_to_write(
    capsys: pytest.CaptureFixture[str], work: Path, tmp_path: Path, replay_file,  # type: ignore[no-untyped-def]
) -> None:
    replay = replay_file(xml_call("Bash", command="find . -name notes.txt -delete"), "done")
    result = ribbit_run(capsys, tmp_path, work, replay, "--mode", "ask", stdin="n: keep my notes\n")
    assert result.code == 0 and (work / "notes.txt").exists()
    assert "tried to write when run read-only" in result.stderr
    output = result.tool_results()[0]
    assert "nothing was changed" in output and "keep my notes" in output


def test_a_read_only_only_plan_never_asks_and_tells_the_model(work: Path, tmp_path: Path) -> None:
    """What issue 14's `plan` mode will reuse: every command read-only, no question, a note on a write."""
    from agent.core.approvals import READ_ONLY_ONLY
    from agent.session.workspace import open_workspace
    from tests.safety.helpers import HookedReplay, Recorder, write_replay

    before = tree_bytes(work)
    recorder, approver = Recorder(), ScriptedApprover(True, True)
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="touch made.txt"), xml_call("Bash", command="cat notes.txt"), "done")
    workspace = open_workspace(HookedReplay(replay), work, mode="ask", approver=approver, sink=recorder, watch=False)
    workspace.session.approvals.policy.plan_bash = lambda command: READ_ONLY_ONLY  # type: ignore[method-assign]
    try:
        workspace.session.run("go")
    finally:
        workspace.close()
    wrote, read = tool_outputs(recorder)
    assert approver.requests == [] and tree_bytes(work) == before
    assert "read-only" in wrote and "nothing was changed" in wrote and wrote.endswith("Exit code 1")
    assert read.strip() == "my notes"
