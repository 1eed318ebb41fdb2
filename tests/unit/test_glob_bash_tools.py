from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tests.unit.helpers import call, make_ctx


def make_tree(root: Path) -> None:
    for rel in ("src/app.py", "src/util/helpers.py", "src/util/data.json", "README.md", "build/gen.py", "debug.log"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)
    (root / ".gitignore").write_text("build/\n*.log\n")


def test_glob_recursive_respects_gitignore_without_git(tmp_path: Path) -> None:
    make_tree(tmp_path)
    out = call(make_ctx(tmp_path), "Glob", pattern="**/*.py").splitlines()
    assert sorted(out) == ["src/app.py", "src/util/helpers.py"]


def test_glob_respects_gitignore_in_a_git_repo_and_never_lists_git(tmp_path: Path) -> None:
    make_tree(tmp_path)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    out = call(make_ctx(tmp_path), "Glob", pattern="**/*").splitlines()
    assert "build/gen.py" not in out and "debug.log" not in out
    assert not any(p.startswith(".git/") for p in out)
    assert "src/util/data.json" in out


def test_glob_star_stays_in_one_folder_braces_and_path(tmp_path: Path) -> None:
    make_tree(tmp_path)
    ctx = make_ctx(tmp_path)
    assert call(ctx, "Glob", pattern="*.md") == "README.md"
    assert sorted(call(ctx, "Glob", pattern="src/**/*.{py,json}").splitlines()) == [
        "src/app.py", "src/util/data.json", "src/util/helpers.py",
    ]
    assert call(ctx, "Glob", pattern="*.py", path="src/util") == "src/util/helpers.py"
    assert call(ctx, "Glob", pattern="*.rs") == "No files found"
    assert call(ctx, "Glob", pattern="*", path="../").startswith("Error:")


def test_glob_is_newest_first_and_cut_at_100(tmp_path: Path) -> None:
    for i in range(120):
        path = tmp_path / f"f{i:03}.txt"
        path.write_text("x")
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    out = call(make_ctx(tmp_path), "Glob", pattern="*.txt").splitlines()
    assert out[0] == "f119.txt" and out[99] == "f020.txt"
    assert "100 of 120" in out[-1]


def test_bash_output_exit_code_and_empty_stdin(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    assert call(ctx, "Bash", command="echo out; echo err >&2") == "out\nerr"
    failed = call(ctx, "Bash", command="echo nope; exit 3")
    assert failed.endswith("Exit code 3") and "nope" in failed
    assert call(ctx, "Bash", command="cat; echo done") == "done"


def test_bash_keeps_the_working_directory_and_resets_it_outside(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    ctx = make_ctx(tmp_path)
    call(ctx, "Bash", command="cd sub")
    assert call(ctx, "Bash", command="pwd") == str(tmp_path.resolve() / "sub")
    out = call(ctx, "Bash", command="cd /")
    assert "reset to the root" in out
    assert call(ctx, "Bash", command="pwd") == str(tmp_path.resolve())


def test_bash_long_output_keeps_head_and_tail(tmp_path: Path) -> None:
    out = call(make_ctx(tmp_path), "Bash", command="seq 1 20000")
    assert len(out) < 31_000
    assert out.startswith("1\n2\n3\n") and out.endswith("19999\n20000")
    assert "lines cut" in out


def gone(pid: int) -> bool:
    """No such process, or a zombie (killed, not yet reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_bash_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    marker, pid_file = tmp_path / "survived", tmp_path / "pid"
    ctx = make_ctx(tmp_path)
    started = time.monotonic()
    out = call(ctx, "Bash", command=f"(echo $BASHPID > {pid_file}; sleep 3; touch {marker}) & sleep 30", timeout=1)
    assert out.endswith("Command timed out after 1 s")
    assert time.monotonic() - started < 20
    # The background job that would touch the marker died with its group (not left to finish its sleep):
    # waited for by its pid, not by sleeping past the 3 s it would take.
    job = int(pid_file.read_text())
    deadline = time.monotonic() + 2.5
    while not gone(job) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert gone(job), "the background job outlived the timeout"
    assert not marker.exists()


def test_bash_timeout_over_600_is_an_argument_error(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from agent.core.tools.bash import BashArgs

    try:
        BashArgs(command="true", timeout=601)
    except ValidationError as exc:
        assert "timeout" in str(exc)
    else:
        raise AssertionError("timeout=601 was accepted")
