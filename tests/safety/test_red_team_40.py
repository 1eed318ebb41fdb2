"""Red team for issue 40 (your own edits are never lost): a busy user's editor and a hostile model against
approvals, commands written through an overlay, undo and the one-writer lock. Real `ribbit run` processes,
real git, watcher and bubblewrap; every outcome read on disk, byte for byte, and in git."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.sandbox.overlay import overlay_works
from tests.conftest import git, xml_call
from tests.safety.cli import write_replay
from tests.safety.test_your_edits_survive import (
    READ_CALC, read_until, ribbit_run, ribbit_undo, summary_of, tool_results,
)

ORIGINAL = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
USERS = "def add(a, b):\n    return a - b  # the user's own version\n"
FIX_ADD = xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b")
QUESTION = "[y/n/n: reason] "
# The command signals it has done its first part (a file it removes before it ends, so it leaves nothing)
# and waits while the user acts (the user also leaves a file of theirs, `go.mark`). The wait is a `sleep` named WAIT_NAME that the test kills (`release`): a file the user creates in the lower
# layer is not seen through the overlay once the name was looked up (a cached negative entry), so polling
# for `go.mark` ran to its cap in every test.
WAIT_NAME = "ribbit-rt40-wait"
# release() ends every sleep of that name: the file's tests run on one worker, one at a time (tests.suite).
pytestmark = pytest.mark.xdist_group("red_team_40")
WAIT = f"touch ready.mark; (exec -a {WAIT_NAME} sleep 45) || true; rm -f ready.mark"


def release() -> None:
    """End the command's wait: kill the `sleep` named WAIT_NAME (its PID namespace is inside ours)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "cmdline").read_bytes().startswith(WAIT_NAME.encode() + b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def needs_overlay() -> None:
    assert overlay_works(), "this system cannot mount the overlay that keeps a command's writes apart"


def editor_rename_save(path: Path, text: str) -> None:
    """vim / VS Code / JetBrains 'safe write': a temp file beside it, renamed over it."""
    tmp = path.with_name(f".{path.name}.swp~")
    tmp.write_text(text)
    os.replace(tmp, path)


def editor_truncate_save(path: Path, text: str) -> None:
    with open(path, "r+") as handle:
        handle.truncate(0)
        handle.flush()
        handle.write(text)


def run_with_user_during_command(
    repo: Path, state: Path, tmp_path: Path, command: str, user: Callable[[], object], *turns: str,
    mode: str = "full-auto", timeout: int | None = None,
) -> subprocess.Popen[str]:
    """`ribbit run`: a Bash `command` (which must contain WAIT) then `turns`; `user()` acts while the
    command waits; returns the ended process. The transcript is tmp_path / "t.jsonl"."""
    needs_overlay()
    args = {"command": command} if timeout is None else {"command": command, "timeout": timeout}
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", **args), *turns, "Done.")
    proc = ribbit_run(repo, replay, tmp_path / "t.jsonl", "--mode", mode)
    try:
        overlays = state / "ribbit" / "overlays"
        deadline = time.monotonic() + 120
        while not list(overlays.glob("overlay-*/upper/ready.mark")):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
        user()
        (repo / "go.mark").write_text("the user's new file\n")
        release()
        proc.wait(timeout=180)
    finally:
        proc.kill()
    return proc


# -- while a command runs ------------------------------------------------------------------------------


@pytest.mark.parametrize("save", [editor_rename_save, editor_truncate_save], ids=["rename", "truncate"])
def test_user_saves_a_file_the_command_also_rewrites(repo: Path, isolated_state: Path, tmp_path: Path, save) -> None:  # type: ignore[no-untyped-def]
    proc = run_with_user_during_command(
        repo, isolated_state, tmp_path, f"sed -i 's/a - b/a * b/' calc.py; echo built > out.txt; {WAIT}",
        lambda: save(repo / "calc.py", USERS),
    )
    assert proc.returncode == 0
    assert (repo / "calc.py").read_text() == USERS  # the user's bytes, not the command's
    assert (repo / "out.txt").read_text() == "built\n"
    assert any("not applied, because they changed outside" in r and "calc.py" in r for r in tool_results(tmp_path / "t.jsonl"))
    assert summary_of(tmp_path / "t.jsonl")["files_changed"] == ["out.txt"]
    assert ribbit_undo(repo).returncode == 0
    assert (repo / "calc.py").read_text() == USERS and not (repo / "out.txt").exists()
    assert (repo / "go.mark").read_text() == "the user's new file\n"
    assert git(repo, "show", "HEAD:calc.py") == ORIGINAL  # nothing committed on the user's branch


def test_user_changes_only_the_mode_of_a_file_the_command_rewrites(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    proc = run_with_user_during_command(
        repo, isolated_state, tmp_path, f"sed -i 's/a - b/a * b/' calc.py; {WAIT}",
        lambda: os.chmod(repo / "calc.py", 0o755),
    )
    assert proc.returncode == 0
    assert (repo / "calc.py").read_text() == ORIGINAL
    assert os.stat(repo / "calc.py").st_mode & 0o777 == 0o755, "after the run"
    assert summary_of(tmp_path / "t.jsonl")["files_changed"] == []  # the user's chmod is not the agent's
    ribbit_undo(repo)
    assert (repo / "calc.py").read_text() == ORIGINAL
    assert os.stat(repo / "calc.py").st_mode & 0o777 == 0o755, "after undo"


def test_user_deletes_a_file_the_command_rewrites(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    proc = run_with_user_during_command(
        repo, isolated_state, tmp_path, f"sed -i 's/a - b/a * b/' calc.py; echo built > out.txt; {WAIT}",
        lambda: os.unlink(repo / "calc.py"),
    )
    assert proc.returncode == 0
    assert not (repo / "calc.py").exists()  # the user's deletion stands
    assert (repo / "out.txt").read_text() == "built\n"
    assert ribbit_undo(repo).returncode == 0
    assert not (repo / "calc.py").exists() and not (repo / "out.txt").exists()


def test_user_creates_a_file_the_command_does_not_touch(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    proc = run_with_user_during_command(
        repo, isolated_state, tmp_path, f"echo built > out.txt; {WAIT}",
        lambda: (repo / "notes.md").write_text("my notes\n"),
    )
    assert proc.returncode == 0
    assert summary_of(tmp_path / "t.jsonl")["files_changed"] == ["out.txt"]
    assert ribbit_undo(repo).returncode == 0
    assert (repo / "notes.md").read_text() == "my notes\n" and (repo / "go.mark").exists()
    assert not (repo / "out.txt").exists()


def test_user_creates_the_same_new_file_as_the_command(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    proc = run_with_user_during_command(
        repo, isolated_state, tmp_path, f"echo from the command > notes.md; {WAIT}",
        lambda: (repo / "notes.md").write_text("my notes\n"),
    )
    assert proc.returncode == 0
    assert (repo / "notes.md").read_text() == "my notes\n"
    ribbit_undo(repo)
    assert (repo / "notes.md").read_text() == "my notes\n"


def test_user_edits_a_file_the_command_deletes(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    proc = run_with_user_during_command(
        repo, isolated_state, tmp_path, f"rm calc.py; {WAIT}", lambda: editor_rename_save(repo / "calc.py", USERS),
    )
    assert proc.returncode == 0
    assert (repo / "calc.py").read_text() == USERS
    ribbit_undo(repo)
    assert (repo / "calc.py").read_text() == USERS


def test_user_deletes_a_file_during_a_command_that_does_not_touch_it(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    proc = run_with_user_during_command(
        repo, isolated_state, tmp_path, f"echo built > out.txt; {WAIT}", lambda: os.unlink(repo / "calc.py"),
    )
    assert proc.returncode == 0
    assert summary_of(tmp_path / "t.jsonl")["files_changed"] == ["out.txt"]
    assert ribbit_undo(repo).returncode == 0
    assert not (repo / "calc.py").exists()  # undo does not bring back what the user deleted


def test_command_deletes_a_file_the_user_then_recreates_and_undo_keeps_it(repo: Path, tmp_path: Path) -> None:
    needs_overlay()
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="rm calc.py"), "Done.")
    proc = ribbit_run(repo, replay, tmp_path / "t.jsonl", "--mode", "full-auto")
    proc.communicate(timeout=180)
    assert proc.returncode == 0 and not (repo / "calc.py").exists()
    (repo / "calc.py").write_text(USERS)  # the user puts their own version back
    undone = ribbit_undo(repo)
    # Refused as a whole, with one line naming the file (ribbit undo refuses a session whose deleted file
    # came back, rather than keeping it and undoing the rest as it does for an edited one).
    assert undone.returncode == 1 and "calc.py changed after the agent's change" in undone.stderr
    assert (repo / "calc.py").read_text() == USERS


def test_command_killed_by_its_timeout_mid_write_is_the_agents_and_undo_takes_it_back(
    repo: Path, isolated_state: Path, tmp_path: Path,
) -> None:
    proc = run_with_user_during_command(
        repo, isolated_state, tmp_path, f"printf 'def add(a, b):\\n    ret' > calc.py; {WAIT}; sleep 60",
        lambda: (repo / "notes.md").write_text("my notes\n"), timeout=4,
    )
    assert proc.returncode == 0
    assert any("timed out" in r for r in tool_results(tmp_path / "t.jsonl"))
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    ret"  # the partial upper layer is applied ...
    assert "calc.py" in summary_of(tmp_path / "t.jsonl")["files_changed"]  # (and the killed command's marker)
    assert ribbit_undo(repo).returncode == 0
    assert (repo / "calc.py").read_text() == ORIGINAL  # ... as the agent's, and undone
    assert (repo / "notes.md").read_text() == "my notes\n"


def test_command_makes_a_hard_link_fifo_and_mode_000_file_and_undo_leaves_the_users_file(
    repo: Path, isolated_state: Path, tmp_path: Path,
) -> None:
    proc = run_with_user_during_command(
        repo, isolated_state, tmp_path,
        f"ln calc.py linked.py; mkfifo pipe; echo secret > locked; chmod 000 locked; {WAIT}",
        lambda: None,
    )
    assert proc.returncode == 0
    editor_truncate_save(repo / "calc.py", USERS)  # the user edits their file in place after the command
    assert (repo / "calc.py").read_text() == USERS
    undone = ribbit_undo(repo)
    assert undone.returncode == 0, undone.stderr
    assert (repo / "calc.py").read_text() == USERS  # the hard link's shared inode took the user's bytes; kept
    assert not (repo / "linked.py").exists() and not (repo / "locked").exists()


def test_undo_takes_back_a_fifo_the_command_made(repo: Path, tmp_path: Path) -> None:
    needs_overlay()
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="mkfifo pipe"), "Done.")
    ribbit_run(repo, replay, tmp_path / "t.jsonl", "--mode", "full-auto").communicate(timeout=180)
    assert os.path.lexists(repo / "pipe")
    undone = ribbit_undo(repo)
    assert undone.returncode == 0, undone.stderr
    assert not os.path.lexists(repo / "pipe") and "removed pipe" in undone.stdout
    assert summary_of(tmp_path / "t.jsonl")["files_changed"] == ["pipe"]


# -- while a question waits (ask mode) ---------------------------------------------------------------


def ask_then(repo: Path, tmp_path: Path, turns: tuple[str, ...], user: Callable[[], object], answers: int = 1) -> str:
    replay = write_replay(tmp_path / "r.jsonl", *turns, "Stopped.")
    proc = ribbit_run(repo, replay, tmp_path / "t.jsonl", "--mode", "ask")
    seen = ""
    try:
        assert proc.stdin is not None and proc.stderr is not None
        seen += read_until(proc.stderr, QUESTION)
        user()
        proc.stdin.write("y\n" * answers)
        proc.stdin.close()
        proc.wait(timeout=120)
        seen += proc.stderr.read()
    finally:
        proc.kill()
    return seen


def test_ask_rename_save_while_the_diff_waits_is_asked_again(repo: Path, tmp_path: Path) -> None:
    users = ORIGINAL + "# mine\n"
    seen = ask_then(repo, tmp_path, (READ_CALC, FIX_ADD), lambda: editor_rename_save(repo / "calc.py", users), answers=2)
    assert (repo / "calc.py").read_text() == FIXED + "# mine\n", seen[-2000:]


def test_ask_mode_bit_change_while_the_diff_waits_is_kept(repo: Path, tmp_path: Path) -> None:
    ask_then(repo, tmp_path, (READ_CALC, FIX_ADD), lambda: os.chmod(repo / "calc.py", 0o755))
    assert (repo / "calc.py").read_text() == FIXED
    assert os.stat(repo / "calc.py").st_mode & 0o777 == 0o755


def test_ask_delete_while_the_diff_waits_stays_deleted(repo: Path, tmp_path: Path) -> None:
    ask_then(repo, tmp_path, (READ_CALC, FIX_ADD), lambda: os.unlink(repo / "calc.py"))
    assert not (repo / "calc.py").exists()
    ribbit_undo(repo)
    assert not (repo / "calc.py").exists()


def test_ask_symlink_while_the_diff_waits_is_not_written_through(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere.py").write_text(ORIGINAL)

    def link() -> None:
        os.unlink(repo / "calc.py")
        os.symlink(tmp_path / "elsewhere.py", repo / "calc.py")

    ask_then(repo, tmp_path, (READ_CALC, FIX_ADD), link)
    assert os.path.islink(repo / "calc.py")
    assert (tmp_path / "elsewhere.py").read_text() == ORIGINAL


def test_ask_write_of_a_file_the_user_changes_while_it_waits_is_refused(repo: Path, tmp_path: Path) -> None:
    write = xml_call("Write", file_path="calc.py", content=FIXED)
    ask_then(repo, tmp_path, (READ_CALC, write), lambda: editor_truncate_save(repo / "calc.py", USERS))
    assert (repo / "calc.py").read_text() == USERS
    assert any("changed while the change waited" in r for r in tool_results(tmp_path / "t.jsonl"))


def test_ask_write_of_a_new_file_the_user_creates_while_it_waits_is_refused(repo: Path, tmp_path: Path) -> None:
    write = xml_call("Write", file_path="notes.md", content="the agent's\n")
    ask_then(repo, tmp_path, (write,), lambda: (repo / "notes.md").write_text("my notes\n"))
    assert (repo / "notes.md").read_text() == "my notes\n"


def test_ask_edit_whose_text_the_user_repeats_is_not_made_on_the_wrong_line(repo: Path, tmp_path: Path) -> None:
    users = ORIGINAL + "\n\ndef sub(a, b):\n    return a - b\n"
    ask_then(repo, tmp_path, (READ_CALC, FIX_ADD), lambda: (repo / "calc.py").write_text(users), answers=2)
    assert (repo / "calc.py").read_text() == users  # ambiguous now: refused, the user's file as they left it


def test_ask_edit_overlapping_the_users_change_to_the_same_line(repo: Path, tmp_path: Path) -> None:
    users = "def add(a, b):\n    return a - b or 0  # the user's\n"
    seen = ask_then(repo, tmp_path, (READ_CALC, FIX_ADD), lambda: (repo / "calc.py").write_text(users), answers=2)
    # Made again on the user's line and shown again before it lands: the user's text around it kept.
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b or 0  # the user's\n"
    assert seen.count(QUESTION) == 2


# -- two sessions, undo while one runs ---------------------------------------------------------------


def test_ribbit_undo_while_a_session_runs_a_command_is_refused(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    needs_overlay()
    first = write_replay(tmp_path / "a.jsonl", xml_call("Bash", command="echo one > one.txt"), "Done.")
    done = ribbit_run(repo, first, tmp_path / "a.t", "--mode", "full-auto")
    done.communicate(timeout=180)
    assert (repo / "one.txt").exists()
    undone: list[subprocess.CompletedProcess[str]] = []
    proc = run_with_user_during_command(
        repo, isolated_state, tmp_path, f"echo two > two.txt; {WAIT}", lambda: undone.append(ribbit_undo(repo)),
    )
    assert proc.returncode == 0
    assert undone[0].returncode != 0 and "another ribbit session" in undone[0].stderr + undone[0].stdout
    assert (repo / "one.txt").read_text() == "one\n" and (repo / "two.txt").read_text() == "two\n"


def test_a_crashed_session_releases_the_checkout_and_leaves_the_users_edit(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    needs_overlay()
    replay = write_replay(tmp_path / "a.jsonl", xml_call("Bash", command=f"echo x > calc.py; {WAIT}"), "Done.")
    proc = ribbit_run(repo, replay, tmp_path / "a.t", "--mode", "full-auto")
    try:
        deadline = time.monotonic() + 120
        while not list((isolated_state / "ribbit" / "overlays").glob("overlay-*/upper/ready.mark")):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        editor_rename_save(repo / "calc.py", USERS)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    (repo / "go.mark").write_text("go\n")
    release()  # the orphaned command (if still alive) ends
    time.sleep(1)
    assert (repo / "calc.py").read_text() == USERS
    second = write_replay(tmp_path / "b.jsonl", xml_call("Write", file_path="second.txt", content="2\n"), "Done.")
    again = ribbit_run(repo, second, tmp_path / "b.t", "--mode", "full-auto")
    _out, err = again.communicate(timeout=180)
    assert again.returncode == 0 and "another ribbit session" not in err
    assert (repo / "second.txt").read_text() == "2\n"
    assert (repo / "calc.py").read_text() == USERS
    undone = ribbit_undo(repo)
    assert undone.returncode == 0, undone.stderr
    assert (repo / "calc.py").read_text() == USERS and not (repo / "second.txt").exists()


def test_plan_mode_shares_the_checkout_and_writes_nothing(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    needs_overlay()
    told: list[str] = []

    def plan() -> None:
        replay = write_replay(tmp_path / "p.jsonl", xml_call("Read", file_path="calc.py"),
                              xml_call("Write", file_path="plan.txt", content="x\n"), "A plan.")
        second = ribbit_run(repo, replay, tmp_path / "p.t", "--mode", "plan")
        _out, err = second.communicate(timeout=180)
        told.append(err)

    proc = run_with_user_during_command(repo, isolated_state, tmp_path, f"echo built > out.txt; {WAIT}", plan)
    assert proc.returncode == 0
    assert not (repo / "plan.txt").exists()
    assert "Traceback" not in told[0] and "another ribbit session" not in told[0]
    assert (repo / "out.txt").read_text() == "built\n"
