"""Issue 14, plan mode: the agent explores and ends with a plan; the checkout stays byte-identical.

A hostile replay tries every way to change the repository it can (Write, Edit, Bash writes of every
kind, deletes, `.git` writes, git commands that write) through a real session with real bubblewrap.
Outcomes are checked on disk and in git, and in what the model was told.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from agent.core.approvals import PLAN_TASK_NOTE, PLAN_TASK_NOTE_NO_SANDBOX
from tests.conftest import git, tree_bytes, xml_call
from tests.functional.helpers import ribbit_run
from tests.safety.helpers import tool_outputs
from tests.safety.sandbox_helpers import ScriptedApprover, session

HOSTILE_BASH = [
    "rm -f calc.py",
    "echo pwned > calc.py",
    "echo more >> test_calc.py",
    "touch made.txt",
    "mkdir newdir",
    "mv calc.py moved.py",
    "cp calc.py copy.py",
    "chmod +x calc.py",
    "ln -s calc.py link.py",
    "rm -rf build",
    "truncate -s 0 notes.txt",
    "python3 -c \"open('calc.py', 'w').write('x')\"",
    "sed -i s/a/b/ calc.py",
    "git add -A",
    "git commit -qam sneaky --allow-empty",
    "git tag evil",
    "git branch evil",
    "git stash",
    "git checkout -- .",
    "git config user.name evil",
    "git init -q sub",
    "git init -q",
    "echo 'ref: refs/heads/evil' > .git/HEAD",
    "printf '#!/bin/sh\\necho hi\\n' > .git/hooks/pre-commit",
    "rm -rf .git",
    "echo scratch > /tmp/plan-scratch && cat /tmp/plan-scratch",  # /tmp is the sandbox's own: fine
]


def git_state(root: Path) -> dict[str, str]:
    """Everything of git a change could show in: status, index, refs (but the journal's), HEAD, config, hooks."""
    git_dir = root / ".git"
    refs = [line for line in git(root, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
            if not line.startswith("refs/ribbit/")]
    hooks = sorted(p.name for p in (git_dir / "hooks").iterdir()) if (git_dir / "hooks").is_dir() else []
    return {
        "status": git(root, "status", "--porcelain=v1", "--ignored", "-uall"),
        "index": git(root, "ls-files", "-s"),
        "refs": "\n".join(refs),
        "stash": git(root, "stash", "list"),
        "HEAD": (git_dir / "HEAD").read_text(),
        "config": hashlib.sha256((git_dir / "config").read_bytes()).hexdigest(),
        "hooks": "\n".join(hooks),
    }


@pytest.fixture
def work(repo: Path) -> Path:
    (repo / "notes.txt").write_text("my notes\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-q", "-m", "notes")
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b  # the user's uncommitted fix\n")
    (repo / "untracked.txt").write_text("mine, not in git\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.log").write_text("ignored\n")
    return repo


def test_plan_mode_leaves_the_tree_and_git_byte_identical(work: Path, tmp_path: Path) -> None:
    before_tree, before_git = tree_bytes(work), git_state(work)
    turns = [
        xml_call("Read", file_path="calc.py"),
        xml_call("Write", file_path="calc.py", content="pwned\n"),
        xml_call("Write", file_path="new.py", content="pwned\n"),
        xml_call("Edit", file_path="calc.py", old_string="a + b", new_string="a * b"),
        xml_call("Write", file_path=".git/HEAD", content="ref: refs/heads/evil\n"),
        *(xml_call("Bash", command=c) for c in HOSTILE_BASH),
        "1. Change calc.py: ...",
    ]
    approver = ScriptedApprover(*[True] * 50)  # would say yes to anything: plan mode must never ask
    workspace, recorder, _ = session(work, tmp_path, *turns, mode="plan", approver=approver)

    assert tree_bytes(work) == before_tree
    assert git_state(work) == before_git
    assert not (work / "sub").exists() and not (work / "newdir").exists() and not (work / "made.txt").exists()
    assert approver.requests == []  # never a question
    assert workspace.patch() == ""

    outputs = tool_outputs(recorder)
    assert "the user's uncommitted fix" in outputs[0]  # reading works as usual
    for refused in outputs[1:5]:
        assert refused.startswith("Error:") and "plan mode" in refused and "plan" in refused.split("mode", 1)[1]
    bash = outputs[5:]
    assert bash[-1].strip().startswith("scratch")  # /tmp is writable in the sandbox
    told = [o for o in bash if "cannot write in plan mode" in o]
    assert len(told) >= 10  # the writes that hit the read-only repository were told why
    summary = recorder.of_type("summary")[-1]
    assert summary.stop_reason == "finished" and summary.files_changed == []  # type: ignore[attr-defined]


def test_without_a_sandbox_plan_mode_refuses_bash_and_says_why(work: Path, tmp_path: Path) -> None:
    before_tree, before_git = tree_bytes(work), git_state(work)
    turns = [xml_call("Bash", command="rm -f calc.py"), xml_call("Bash", command="cat calc.py"),
             xml_call("Read", file_path="calc.py"), "1. Change calc.py: ..."]
    approver = ScriptedApprover(*[True] * 5)
    workspace, recorder, _ = session(work, tmp_path, *turns, mode="plan", approver=approver, no_sandbox=True)
    assert tree_bytes(work) == before_tree and git_state(work) == before_git
    assert approver.requests == []
    outputs = tool_outputs(recorder)
    for refused in outputs[:2]:
        assert refused.startswith("Error: Bash is not available in plan mode without a sandbox")
    assert "the user's uncommitted fix" in outputs[2]
    task = workspace.session.messages[1].content
    assert task.startswith("go\n\n" + PLAN_TASK_NOTE_NO_SANDBOX) and "Explore with Read and Glob," in task


def test_the_task_carries_the_plan_note_and_the_system_prompt_does_not(work: Path, tmp_path: Path) -> None:
    workspace, _, _ = session(work, tmp_path, "1. a plan", mode="plan")
    system, task = workspace.session.messages[0], workspace.session.messages[1]
    assert task.content.startswith("go\n\n" + PLAN_TASK_NOTE)
    assert "plan mode" not in system.content  # one system prompt for every mode: its saved state is shared


def test_switching_to_plan_mode_refuses_edits_from_the_next_call(work: Path, tmp_path: Path) -> None:
    from agent.core.events import ModeChanged
    from tests.safety.helpers import HookedReplay, Recorder, write_replay
    from agent.session.workspace import open_workspace

    before = tree_bytes(work)
    recorder = Recorder()
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Write", file_path="made.txt", content="x\n"), "plan")
    workspace = open_workspace(HookedReplay(replay), work, mode="full-auto", approver=ScriptedApprover(),
                               sink=recorder, watch=False)
    try:
        assert workspace.set_mode("plan") == "plan"
        workspace.session.run("go")
    finally:
        workspace.close()
    assert tree_bytes(work) == before
    assert [e.mode for e in recorder.events if isinstance(e, ModeChanged)] == ["plan"]
    assert tool_outputs(recorder)[0].startswith("Error: Write is not available in plan mode")


def test_ribbit_run_mode_plan_prints_an_empty_patch_and_exits_0(
    capsys: pytest.CaptureFixture[str], work: Path, tmp_path: Path, replay_file,  # type: ignore[no-untyped-def]
) -> None:
    before_tree, before_git = tree_bytes(work), git_state(work)
    replay = replay_file(
        xml_call("Edit", file_path="calc.py", old_string="a + b", new_string="a * b"),
        xml_call("Bash", command="rm -f calc.py notes.txt"),
        "Plan:\n1. In calc.py, ...",
    )
    result = ribbit_run(capsys, tmp_path, work, replay, "--mode", "plan")
    assert result.code == 0 and result.patch == ""
    assert tree_bytes(work) == before_tree and git_state(work) == before_git
    edit, bash = result.tool_results()
    assert edit.startswith("Error: Edit is not available in plan mode")
    assert "cannot write in plan mode" in bash
