"""Issue 40, second red team: a busy user and a hostile model against what changed after the first one: a
file the user removes while a command rewrites it stays removed (the watcher's `changed_by_others`), the
*uncertain* files of a command that wrote to the checkout directly (`--no-sandbox`), and undo of FIFOs.
Real `ribbit run` / `ribbit undo` processes, real git, watcher and bubblewrap; every outcome read on disk."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import git, xml_call
from tests.safety.cli import ROOT, write_replay
from tests.safety.test_red_team_40 import (
    ORIGINAL, USERS, WAIT, WAIT_NAME, needs_overlay, release, run_with_user_during_command,
)
from tests.safety.test_your_edits_survive import READ_CALC, ribbit_run, ribbit_undo, summary_of

# release() ends every sleep named WAIT_NAME, which test_red_team_40.py's commands use too: both files' tests
# run on one worker, one at a time (the same group).
pytestmark = pytest.mark.xdist_group("red_team_40")
assert WAIT_NAME in WAIT
MODULE = "def helper():\n    return 1\n"


def undo_uncertain(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli", "undo", "--uncertain", "--repo", str(repo)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def run_without_sandbox_with_user(
    repo: Path, tmp_path: Path, turns: tuple[str, ...], user: Callable[[], object],
) -> subprocess.Popen[str]:
    """`ribbit run --no-sandbox` of `turns` (one of them runs WAIT, touching ready.mark in the checkout itself);
    `user()` acts while that command waits."""
    replay = write_replay(tmp_path / "r.jsonl", *turns, "Done.")
    proc = ribbit_run(repo, replay, tmp_path / "t.jsonl", "--mode", "full-auto", "--no-sandbox")
    try:
        deadline = time.monotonic() + 120
        while not (repo / "ready.mark").exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
        user()
        release()
        proc.wait(timeout=180)
    finally:
        proc.kill()
    return proc


def add_package(repo: Path) -> None:
    (repo / "pkg").mkdir()
    (repo / "pkg" / "mod.py").write_text(MODULE)
    (repo / "pkg" / "other.py").write_text("OTHER = 2\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "pkg")


# -- with the overlay: the user removes, re-creates, renames while a command rewrites -------------------


def test_user_removes_and_recreates_a_file_the_command_rewrites(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    def user() -> None:
        os.unlink(repo / "calc.py")
        time.sleep(0.05)
        (repo / "calc.py").write_text(USERS)  # a new inode, made while the command runs

    proc = run_with_user_during_command(repo, isolated_state, tmp_path, f"sed -i 's/a - b/a * b/' calc.py; {WAIT}", user)
    assert proc.returncode == 0
    assert (repo / "calc.py").read_text() == USERS
    assert "calc.py" not in summary_of(tmp_path / "t.jsonl")["files_changed"]
    assert ribbit_undo(repo).returncode in (0, 1)
    assert (repo / "calc.py").read_text() == USERS


def remove_folder_during_command(repo: Path, isolated_state: Path, tmp_path: Path, how: str) -> Path:
    """The user deletes `pkg/` (or a file manager moves it to the trash, on the same disk) while the command
    rewrites `pkg/mod.py`: their removal stands, no `pkg/` comes back (neither the command's mod.py nor an
    empty folder). Returns the trash."""
    add_package(repo)
    trash = tmp_path / "Trash"
    trash.mkdir()

    def user() -> None:
        if how == "rm -rf":
            subprocess.run(["rm", "-rf", str(repo / "pkg")], check=True)
        else:
            os.rename(repo / "pkg", trash / "pkg")

    proc = run_with_user_during_command(
        repo, isolated_state, tmp_path, f"sed -i 's/1/2/' pkg/mod.py; echo built > out.txt; {WAIT}", user,
    )
    assert proc.returncode == 0
    assert not (repo / "pkg").exists(), "the command's pkg/mod.py came back after the user removed pkg/"
    assert (repo / "out.txt").read_text() == "built\n"
    return trash


@pytest.mark.parametrize("how", ["rm -rf", "mv into a trash folder"])
def test_user_removes_the_folder_a_command_rewrites_in(repo: Path, isolated_state: Path, tmp_path: Path, how: str) -> None:
    trash = remove_folder_during_command(repo, isolated_state, tmp_path, how)
    if how != "rm -rf":
        assert (trash / "pkg" / "mod.py").read_text() == MODULE  # the user's trashed copy untouched


def test_undo_after_the_user_removed_a_folder_during_a_command(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    remove_folder_during_command(repo, isolated_state, tmp_path, "rm -rf")
    assert summary_of(tmp_path / "t.jsonl")["files_changed"] == ["out.txt"]
    assert ribbit_undo(repo).returncode == 0
    assert not (repo / "pkg").exists() and not (repo / "out.txt").exists()


def test_undo_after_the_user_trashed_a_folder_during_a_command(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    remove_folder_during_command(repo, isolated_state, tmp_path, "mv into a trash folder")
    assert summary_of(tmp_path / "t.jsonl")["files_changed"] == ["out.txt"]
    assert ribbit_undo(repo).returncode == 0
    assert not (repo / "pkg").exists() and not (repo / "out.txt").exists()


def test_a_commands_own_removal_of_a_folder_is_the_agents_and_undone(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    """The other side of the trashed folder: the command's own `rm -rf pkg` (applied from the overlay, the
    folder's event one of ribbit's) is the agent's: counted, and undo brings pkg/ back."""
    add_package(repo)
    proc = run_with_user_during_command(repo, isolated_state, tmp_path, f"rm -rf pkg; {WAIT}", lambda: None)
    assert proc.returncode == 0 and not (repo / "pkg").exists()
    assert summary_of(tmp_path / "t.jsonl")["files_changed"] == ["pkg/mod.py", "pkg/other.py"]
    assert ribbit_undo(repo).returncode == 0
    assert (repo / "pkg" / "mod.py").read_text() == MODULE and (repo / "pkg" / "other.py").read_text() == "OTHER = 2\n"


def test_a_folder_the_user_trashed_does_not_cover_what_the_agent_makes_there_later(
    repo: Path, isolated_state: Path, tmp_path: Path,
) -> None:
    """The user trashes pkg/ during a command; the agent's next Write makes pkg/new.py: the user's removal
    stays through undo, the agent's new file goes (someone else's folder removal counts only what it took)."""
    add_package(repo)
    trash = tmp_path / "Trash"
    trash.mkdir()
    write = xml_call("Write", file_path="pkg/new.py", content="NEW = 1\n")
    proc = run_with_user_during_command(
        repo, isolated_state, tmp_path, f"echo built > out.txt; {WAIT}", lambda: os.rename(repo / "pkg", trash / "pkg"), write,
    )
    assert proc.returncode == 0 and (repo / "pkg" / "new.py").read_text() == "NEW = 1\n"
    assert summary_of(tmp_path / "t.jsonl")["files_changed"] == ["out.txt", "pkg/new.py"]
    assert ribbit_undo(repo).returncode == 0
    assert not (repo / "pkg").exists() and not (repo / "out.txt").exists()
    assert (trash / "pkg" / "mod.py").read_text() == MODULE


def test_user_renames_a_file_the_command_rewrites(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    """`mv calc.py calc_old.py` while the command rewrites calc.py: the rename stands (no calc.py back with the
    command's bytes), the renamed file is the user's, through undo."""
    proc = run_with_user_during_command(
        repo, isolated_state, tmp_path, f"sed -i 's/a - b/a * b/' calc.py; {WAIT}",
        lambda: os.rename(repo / "calc.py", repo / "calc_old.py"),
    )
    assert proc.returncode == 0
    assert not (repo / "calc.py").exists()
    assert (repo / "calc_old.py").read_text() == ORIGINAL
    assert summary_of(tmp_path / "t.jsonl")["files_changed"] == []
    ribbit_undo(repo)
    assert not (repo / "calc.py").exists() and (repo / "calc_old.py").read_text() == ORIGINAL


def test_command_chmods_a_file_the_user_then_edits(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    """The command only makes calc.py executable (a copy-up); the user saves new content meanwhile: the user's
    bytes kept, the command's mode not laid over them; undo leaves both."""
    proc = run_with_user_during_command(
        repo, isolated_state, tmp_path, f"chmod 755 calc.py; {WAIT}", lambda: (repo / "calc.py").write_text(USERS),
    )
    assert proc.returncode == 0
    assert (repo / "calc.py").read_text() == USERS
    assert summary_of(tmp_path / "t.jsonl")["files_changed"] == []
    assert ribbit_undo(repo).returncode in (0, 1)
    assert (repo / "calc.py").read_text() == USERS


# -- FIFOs ---------------------------------------------------------------------------------------------


def test_command_makes_a_fifo_named_like_a_file_the_user_removes(repo: Path, isolated_state: Path, tmp_path: Path) -> None:
    """A hostile command replaces the user's notes.md by a FIFO; meanwhile the user removes notes.md. Their
    removal stands (as it does for a regular file the command rewrote); nothing blocks on a pipe there."""
    (repo / "notes.md").write_text("my notes\n")
    proc = run_with_user_during_command(
        repo, isolated_state, tmp_path, f"rm notes.md; mkfifo notes.md; {WAIT}", lambda: os.unlink(repo / "notes.md"),
    )
    assert proc.returncode == 0
    assert not os.path.lexists(repo / "notes.md"), "the command's FIFO was made where the user removed notes.md"
    assert ribbit_undo(repo).returncode in (0, 1)
    assert not os.path.lexists(repo / "notes.md") or (repo / "notes.md").read_text() == "my notes\n"


def test_fifo_the_user_replaced_by_a_file_is_kept_by_undo(repo: Path, tmp_path: Path) -> None:
    """The command makes a FIFO `pipe`; afterwards the user removes it and saves a regular file of that name:
    undo never removes (nor opens) the user's file."""
    needs_overlay()
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="mkfifo pipe; echo built > out.txt"), "Done.")
    ribbit_run(repo, replay, tmp_path / "t.jsonl", "--mode", "full-auto").communicate(timeout=180)
    assert stat.S_ISFIFO(os.lstat(repo / "pipe").st_mode)
    os.unlink(repo / "pipe")
    (repo / "pipe").write_text("the user's file\n")
    undone = ribbit_undo(repo)
    assert (repo / "pipe").read_text() == "the user's file\n", undone.stdout + undone.stderr
    if undone.returncode != 0:
        assert "pipe" in undone.stderr


def test_users_fifo_removed_by_a_command_then_a_users_file_there_is_kept(repo: Path, tmp_path: Path) -> None:
    """The user's own FIFO `ctl` (untracked); the command removes it; the user then saves a regular file `ctl`.
    Undo would make the FIFO again there: it must not replace the user's file."""
    needs_overlay()
    os.mkfifo(repo / "ctl", 0o640)
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="rm ctl; echo built > out.txt"), "Done.")
    ribbit_run(repo, replay, tmp_path / "t.jsonl", "--mode", "full-auto").communicate(timeout=180)
    assert not os.path.lexists(repo / "ctl")
    (repo / "ctl").write_text("the user's file\n")
    undone = ribbit_undo(repo)
    assert (repo / "ctl").read_text() == "the user's file\n", undone.stdout + undone.stderr


@pytest.mark.xfail(strict=True, reason=(
    "a FIFO of the user's that no snapshot holds (git does not list FIFOs; the journal looks for them only "
    "where ribbit wrote before) is not known to the step's start snapshot: a command's `rm` of it is not "
    "undone (`ribbit undo`: nothing to undo)"))
def test_fifo_a_command_removed_is_made_again_with_its_mode(repo: Path, tmp_path: Path) -> None:
    needs_overlay()
    os.mkfifo(repo / "ctl", 0o640)
    os.chmod(repo / "ctl", 0o640)
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="rm ctl"), "Done.")
    ribbit_run(repo, replay, tmp_path / "t.jsonl", "--mode", "full-auto").communicate(timeout=180)
    assert not os.path.lexists(repo / "ctl")
    undone = ribbit_undo(repo)
    assert undone.returncode == 0, undone.stderr
    info = os.lstat(repo / "ctl")
    assert stat.S_ISFIFO(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o640


# -- without the overlay: uncertain files ------------------------------------------------------------


def test_no_sandbox_the_users_edit_of_a_file_the_agents_write_changed_in_the_same_step(repo: Path, tmp_path: Path) -> None:
    """One step: a Write of calc.py, then a command (writing to the checkout directly) during which the user
    appends a line to calc.py. A plain undo must not take calc.py back (the user's line would go): left, named."""
    users_line = "# the user's line\n"
    turn = xml_call("Write", file_path="calc.py", content="def add(a, b):\n    return a + b\n") + "\n" + xml_call(
        "Bash", command=f"echo built > out.txt; {WAIT}")

    def user() -> None:
        with open(repo / "calc.py", "a") as editor:
            editor.write(users_line)

    proc = run_without_sandbox_with_user(repo, tmp_path, (READ_CALC, turn), user)
    assert proc.returncode == 0
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n" + users_line
    plain = ribbit_undo(repo)
    assert plain.returncode == 0, plain.stderr
    assert (repo / "calc.py").read_text().endswith(users_line)
    assert "calc.py" in plain.stdout + plain.stderr


def test_without_the_overlay_a_folder_trashed_during_a_command_is_uncertain(repo: Path, tmp_path: Path) -> None:
    """--no-sandbox: the user moves pkg/ to the trash while a command runs (one event, the folder's): its
    files are uncertain like every change in the command's window: a plain undo leaves pkg/ gone and names
    them; `ribbit undo --uncertain` (the user says nobody else wrote) brings them back."""
    add_package(repo)
    trash = tmp_path / "Trash"
    trash.mkdir()
    turn = xml_call("Bash", command=f"echo built > out.txt; {WAIT}")
    proc = run_without_sandbox_with_user(repo, tmp_path, (turn,), lambda: os.rename(repo / "pkg", trash / "pkg"))
    assert proc.returncode == 0 and not (repo / "pkg").exists()
    plain = ribbit_undo(repo)
    assert plain.returncode == 0, plain.stderr
    assert not (repo / "pkg").exists() and "pkg/mod.py" in plain.stdout + plain.stderr
    asked = undo_uncertain(repo)
    assert asked.returncode == 0, asked.stderr
    assert (repo / "pkg" / "mod.py").read_text() == MODULE


def test_undo_uncertain_after_the_user_edited_an_uncertain_file_loses_nothing(repo: Path, tmp_path: Path) -> None:
    """--no-sandbox: the command changes calc.py (uncertain); a plain undo leaves it; the user then edits it;
    `ribbit undo --uncertain` must not take the user's edit away (refused, or the file kept and named)."""
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="echo '# by the command' >> calc.py; echo b > out.txt"), "Done.")
    proc = ribbit_run(repo, replay, tmp_path / "t.jsonl", "--mode", "full-auto", "--no-sandbox")
    proc.communicate(timeout=180)
    assert proc.returncode == 0
    assert ribbit_undo(repo).returncode == 0
    (repo / "calc.py").write_text(USERS)  # the user's own version, after the session
    asked = undo_uncertain(repo)
    assert (repo / "calc.py").read_text() == USERS, asked.stdout + asked.stderr
    assert asked.returncode == 1 and "calc.py changed after the agent's change" in asked.stderr, asked.stderr
    assert (repo / "out.txt").exists()  # refused as a whole: nothing restored


def test_undo_uncertain_of_a_session_not_undone_takes_back_everything_once(repo: Path, tmp_path: Path) -> None:
    """`ribbit undo --uncertain` straight away (no plain undo first): the Write and the command's files all go
    back; a plain `ribbit undo` afterwards has nothing left and changes nothing."""
    replay = write_replay(
        tmp_path / "r.jsonl", xml_call("Write", file_path="new.txt", content="agent\n"),
        xml_call("Bash", command="echo b > out.txt"), "Done.",
    )
    proc = ribbit_run(repo, replay, tmp_path / "t.jsonl", "--mode", "full-auto", "--no-sandbox")
    proc.communicate(timeout=180)
    assert proc.returncode == 0
    asked = undo_uncertain(repo)
    assert asked.returncode == 0, asked.stderr
    assert not (repo / "new.txt").exists() and not (repo / "out.txt").exists()
    (repo / "out.txt").write_text("the user's out.txt\n")
    again = ribbit_undo(repo)
    assert again.returncode == 1 and "nothing to undo" in again.stderr
    twice = undo_uncertain(repo)
    assert twice.returncode == 1 and "already undone" in twice.stderr
    assert (repo / "out.txt").read_text() == "the user's out.txt\n"


OTHER_DISK_SCRIPT = r"""
import json, os, subprocess, sys
from pathlib import Path
state, repo, replay, transcript = map(Path, sys.argv[1:5])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(state)], check=True)
os.environ["XDG_STATE_HOME"] = str(state)
def ribbit(*args):
    done = subprocess.run([sys.executable, "-m", "app.cli", *args, "--repo", str(repo)], capture_output=True, text=True)
    return {"code": done.returncode, "out": done.stdout + done.stderr}
seen = {"run": ribbit("run", "go", "--model", f"replay:{replay}", "--transcript", str(transcript), "--mode", "full-auto")}
seen["after_run"] = (repo / "calc.py").read_text()
seen["plain"] = ribbit("undo")
seen["after_plain"] = (repo / "calc.py").read_text()
seen["out_after_plain"] = (repo / "out.txt").exists()
seen["asked"] = ribbit("undo", "--uncertain")
seen["after_asked"] = (repo / "calc.py").read_text()
seen["out_after_asked"] = (repo / "out.txt").exists()
print("RESULT " + json.dumps(seen))
"""


def test_state_on_another_disk_with_the_sandbox_on_leaves_the_commands_files_uncertain(
    repo: Path, isolated_state: Path, tmp_path: Path,
) -> None:
    """The sandbox on, ribbit's state folder on a tmpfs (another disk than the repository): no overlay, the
    command writes to the checkout directly. A plain undo leaves its files and names them; `--uncertain`
    takes them back."""
    state = tmp_path / "state-disk"
    state.mkdir()
    outside = tmp_path / "outside.txt"  # the sandbox keeps what is outside the repository read-only
    command = f"echo '# cmd' >> calc.py; echo built > out.txt; echo escaped > {outside} 2>/dev/null; true"
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=command), "Done.")
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", sys.executable, "-c", OTHER_DISK_SCRIPT, str(state),
         str(repo), str(replay), str(tmp_path / "t.jsonl")],
        capture_output=True, text=True, cwd=ROOT, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert seen["run"]["code"] == 0, seen["run"]["out"][-2000:]
    assert not outside.exists(), "the command ran without the sandbox"
    assert seen["after_run"] == ORIGINAL + "# cmd\n"
    assert seen["plain"]["code"] == 0, seen["plain"]["out"]
    assert seen["after_plain"] == ORIGINAL + "# cmd\n" and seen["out_after_plain"]
    assert "cannot tell" in seen["plain"]["out"] and "calc.py" in seen["plain"]["out"]
    assert seen["asked"]["code"] == 0, seen["asked"]["out"]
    assert seen["after_asked"] == ORIGINAL and not seen["out_after_asked"]


def test_no_sandbox_command_deletes_the_users_uncommitted_file_and_it_can_be_had_back(repo: Path, tmp_path: Path) -> None:
    """A hostile command (--no-sandbox) removes the user's uncommitted notes: a plain undo leaves the removal
    (uncertain) but names the file; `ribbit undo --uncertain` brings the user's bytes back."""
    (repo / "notes.md").write_text("my uncommitted notes\n")
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="rm notes.md"), "Done.")
    proc = ribbit_run(repo, replay, tmp_path / "t.jsonl", "--mode", "full-auto", "--no-sandbox")
    proc.communicate(timeout=180)
    assert proc.returncode == 0 and not (repo / "notes.md").exists()
    assert summary_of(tmp_path / "t.jsonl")["files_changed"] == ["notes.md"]
    plain = ribbit_undo(repo)
    assert "notes.md" in plain.stdout + plain.stderr
    asked = undo_uncertain(repo)
    assert asked.returncode == 0, asked.stderr
    assert (repo / "notes.md").read_text() == "my uncommitted notes\n"
