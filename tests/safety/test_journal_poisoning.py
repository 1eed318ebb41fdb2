"""Hole 6 (and the journal half of 8): no path the agent creates ends a session, hides files from
the patch, or stops the next session from starting. What cannot be journaled is named once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.fs import remove_tree
from agent.git import unstorable_reason
from tests.conftest import git, tree_bytes, xml_call
from tests.functional.helpers import ribbit_run
from tests.safety.helpers import start, write_replay

ROOT = Path(__file__).resolve().parents[2]
DEEP = 2_100  # 'd/' * 2,100: past PATH_MAX (4,096) whatever the temp folder's length


def notices(recorder) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.text for e in recorder.of_type("notice")]


def ribbit_undo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli", "undo", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_paths_git_refuses_end_nothing_and_are_named(capsys, repo: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    turns = [
        xml_call("Write", file_path="git~1/notes.txt", content="x\n"),
        xml_call("Write", file_path=".GIT/config", content="[core]\n"),
        xml_call("Bash", command="mkdir -p git~1 .GIT sub/.Git && echo x > git~1/notes.txt && echo y > .GIT/config "
                                 "&& echo z > sub/.Git/HEAD && echo fine > fine.txt"),
        "done",
    ]
    result = ribbit_run(capsys, tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "full-auto")
    assert result.code == 0, result.stderr
    outputs = result.tool_results()
    assert outputs[0].startswith("Error:") and outputs[1].startswith("Error:")  # the tools refuse them
    assert "+fine" in result.patch
    assert "git~1" not in result.patch and ".GIT" not in result.patch
    assert "git~1/notes.txt" in result.stderr and "not recorded" in result.stderr
    assert result.of_type("summary")[0]["stop_reason"] == "finished"
    # The next session starts normally and its undo works.
    again = ribbit_run(capsys, tmp_path, repo, write_replay(tmp_path / "r2.jsonl", xml_call("Bash", command="echo two >> fine.txt"), "done"), "--mode", "full-auto")
    assert again.code == 0, again.stderr
    assert "+two" in again.patch
    undone = ribbit_undo("--repo", str(repo))
    assert undone.returncode == 0, undone.stderr
    assert (repo / "fine.txt").read_text() == "fine\n"


@pytest.mark.parametrize("pointer", ["gitdir: ../.git\n", "gitdir: /nonexistent\n", None])
def test_a_nested_git_never_hides_a_folder_from_the_patch(repo: Path, tmp_path: Path, pointer: str | None) -> None:
    """`sub/.git` as a file pointing at the real repository, at nothing, or a whole nested repo."""
    make = "mkdir -p sub && echo 'a = 1' > sub/a.py && echo 'b = 2' > sub/b.py"
    if pointer is not None:
        make += f" && printf %s '{pointer}' > sub/.git"
    else:
        make += " && git -C sub init -q"
    named = pointer != "gitdir: /nonexistent\n"  # git skips an invalid .git file silently: no repository
    before = tree_bytes(repo)
    workspace, recorder = start(repo, write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=make), "done"))
    try:
        summary = workspace.session.run("go")
        patch = workspace.patch()
        assert summary.stop_reason == "finished"
        assert "+a = 1" in patch and "+b = 2" in patch
        assert any("sub/.git" in n for n in notices(recorder)) or not named
        result = workspace.undo_last()
    finally:
        workspace.close()
    assert sorted(result.deleted) == ["sub/a.py", "sub/b.py"]
    assert {k: v for k, v in tree_bytes(repo).items() if not k.startswith("sub/")} == before


def test_a_tracked_folder_that_gains_a_git_keeps_its_new_files_in_the_patch(repo: Path, tmp_path: Path) -> None:
    (repo / "pkg").mkdir()
    (repo / "pkg" / "m.py").write_text("m = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "pkg")
    command = "printf 'gitdir: ../.git\\n' > pkg/.git && echo n = 2 > pkg/n.py && echo m = 3 > pkg/m.py"
    workspace, _ = start(repo, write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=command), "done"))
    try:
        workspace.session.run("go")
        patch = workspace.patch()
    finally:
        workspace.close()
    assert "+n = 2" in patch and "+m = 3" in patch


def test_names_with_control_characters_and_invalid_utf8(repo: Path, tmp_path: Path) -> None:
    command = "printf a > \"$(printf 'bell\\a\\nline')\" && printf b > \"$(printf 'bad\\377\\376.txt')\" && echo c > plain.txt"
    workspace, recorder = start(repo, write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=command), "done"))
    try:
        summary = workspace.session.run("go")
        patch = workspace.patch()
        listed = workspace.journal.changed_since_start()
        result = workspace.undo_last()
    finally:
        workspace.close()
    assert summary.stop_reason == "finished"
    assert "bell\a\nline" in listed and os.fsdecode(b"bad\xff\xfe.txt") in listed
    assert "+c" in patch and patch.encode("utf-8", "surrogateescape")  # round-trips to bytes exactly
    assert sorted(result.deleted) == sorted(["bell\a\nline", os.fsdecode(b"bad\xff\xfe.txt"), "plain.txt"])
    assert "\x07" not in result.summary() and "\n" not in result.summary()
    assert sorted(os.listdir(repo)) == [".git", ".gitignore", "calc.py", "test_calc.py"]


def test_fifo_device_and_socket_never_hang_the_journal(repo: Path, tmp_path: Path) -> None:
    command = "mkfifo pipe && mkfifo .gitattributes && echo ok > ok.txt"
    workspace, recorder = start(repo, write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=command), "done"))
    try:
        workspace.session.run("go")
        patch = workspace.patch()
        assert "+ok" in patch and "pipe" not in patch  # a FIFO holds no data: git skips it
        workspace.undo_last()
    finally:
        workspace.close()
    # The next session (whose journal reads .gitattributes files) starts: the FIFO is not read.
    workspace, _ = start(repo, write_replay(tmp_path / "r2.jsonl", "done"))
    workspace.close()
    assert not (repo / "ok.txt").exists()


@pytest.fixture
def deep_cleanup(repo: Path):  # type: ignore[no-untyped-def]
    """Deep trees defeat recursive removal (pytest's own included): remove them iteratively."""
    yield
    remove_tree(repo / "d")


def _deep_command(depth: int, leaf: str) -> str:
    """A tree `depth` folders deep (Python in the sandbox: a shell loop of cd is quadratic)."""
    script = f"import os\nfor _ in range({depth}):\n    os.mkdir('d')\n    os.chdir('d')\nopen('{leaf}', 'w').write('deep\\n')\n"
    return f"python3 -c \"{script}\""


def test_a_tree_deeper_than_path_max_is_named_not_fatal_and_undo_still_works(capsys, repo: Path, tmp_path: Path, deep_cleanup) -> None:  # type: ignore[no-untyped-def]
    deep_path = "d/" * DEEP + "f.txt"
    turns = [
        xml_call("Bash", command=_deep_command(DEEP, "f.txt") + " && echo top > top.txt"),
        xml_call("Write", file_path=deep_path, content="via Write\n"),
        xml_call("Read", file_path=deep_path),
        xml_call("Glob", pattern="**/f.txt"),
        "done",
    ]
    result = ribbit_run(capsys, tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "full-auto")
    assert result.code == 0, result.stderr
    assert "Traceback" not in result.stderr
    outputs = result.tool_results()
    assert outputs[1].startswith("Error:") and "too long" in outputs[1]
    assert "+top" in result.patch
    assert "not recorded" in result.stderr and "d/d/d" in result.stderr
    assert max(len(line) for line in result.stderr.splitlines()) < 1000  # named, not dumped
    undone = ribbit_undo("--repo", str(repo))
    assert undone.returncode == 0, undone.stderr
    assert not (repo / "top.txt").exists()


def test_a_deep_path_within_path_max_is_journaled_and_undone(repo: Path, tmp_path: Path, deep_cleanup) -> None:  # type: ignore[no-untyped-def]
    depth = 1_500  # 3,000+ characters: under PATH_MAX, far past what is usual
    workspace, _ = start(repo, write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=_deep_command(depth, "f.txt")), "done"))
    try:
        workspace.session.run("go")
        assert "+deep" in workspace.patch()
        result = workspace.undo_last()
    finally:
        workspace.close()
    assert result.deleted == ["d/" * depth + "f.txt"]
    assert not (repo / "d").exists()


@pytest.mark.slow  # a tree of thousands of files, journaled: ~7 s
def test_a_wide_tree_is_journaled_whole(repo: Path, tmp_path: Path) -> None:
    command = "mkdir -p many && cd many && for i in $(seq 3000); do echo $i > f$i.txt; done"
    workspace, _ = start(repo, write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=command), "done"))
    try:
        workspace.session.run("go")
        changed = workspace.journal.changed_since_start()
        result = workspace.undo_last()
    finally:
        workspace.close()
    assert len(changed) == 3000 and len(result.deleted) == 3000
    assert not (repo / "many").exists()


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        (".git/config", True), (".GIT/config", True), ("a/.Git/HEAD", True), ("git~1/x", True), (".git. /x", True),
        (".g\u200cit/x", True), ("x/.git::$INDEX_ALLOCATION/y", True), (".github/workflows/ci.yml", False),
        (".gitignore", False), ("git~2/x", False), ("a/b", False),
    ],
)
def test_paths_git_cannot_store_are_recognised(path: str, refused: bool) -> None:
    assert (unstorable_reason(path) is not None) is refused
