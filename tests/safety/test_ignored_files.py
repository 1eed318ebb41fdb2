"""Issue 33's journal holes: git-ignored files (a `.pth` in an ignored `.venv`, `.env`, `build/`), a
disk filled during a step, a file too large to record, permission bits a command sets, and "files
changed" after commands. Real sessions (replay model, real git, bubblewrap), outcomes on disk."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agent.session.workspace import open_workspace
from agent.core.approvals import ApprovalDecision, ApprovalRequest, EditApprovalRequest
from tests.conftest import git, tree_bytes, xml_call
from tests.safety.cli import ribbit_cli
from tests.safety.helpers import HookedReplay, Recorder, start, write_replay

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(".venv") / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
PTH = "import os; open(os.path.join(os.getcwd(), 'PWNED'), 'w').write('agent code ran')\n"


@pytest.fixture
def with_venv(repo: Path) -> Path:
    """The repository with a real, git-ignored virtual environment in `.venv` (and an ignored `.env`)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(repo / ".venv")], check=True)
    (repo / ".gitignore").write_text("build/\n*.log\n.venv/\n.env\n")
    (repo / ".env").write_text("API_TOKEN=the-users-own\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore the venv")
    assert (repo / SITE).is_dir()
    return repo


def python_runs_agent_code(repo: Path) -> bool:
    """Start the virtual environment's python as the user would, and see whether a .pth ran."""
    (repo / "PWNED").unlink(missing_ok=True)
    subprocess.run([str(repo / ".venv" / "bin" / "python"), "-c", "pass"], cwd=repo, check=True, timeout=60)
    return (repo / "PWNED").exists()


def notices(recorder: Recorder) -> list[str]:
    return [e.text for e in recorder.of_type("notice")]  # type: ignore[attr-defined]


class Answers:
    """An approver that says no and keeps every question."""

    def __init__(self, approve: bool = False) -> None:
        self.approve = approve
        self.requests: list[ApprovalRequest] = []

    def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        self.requests.append(request)
        return ApprovalDecision(approved=self.approve, reason=None if self.approve else "no")


def test_auto_edit_asks_before_a_write_into_the_ignored_venv(with_venv: Path, tmp_path: Path) -> None:
    """Hole 1: in auto-edit the agent wrote `_zz_init.pth` into the ignored `.venv` without a question,
    and the user's next python ran it. Now a write there is asked for, and a 'no' leaves nothing."""
    repo = with_venv
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Write", file_path=str(SITE / "_zz_init.pth"), content=PTH), "done")
    answers = Answers(approve=False)
    workspace = open_workspace(
        HookedReplay(replay), repo, mode="auto-edit", approver=answers, sink=Recorder(), watch=False,
    )
    try:
        workspace.session.run("go")
    finally:
        workspace.close()
    asked = [r for r in answers.requests if isinstance(r, EditApprovalRequest)]
    assert len(asked) == 1 and asked[0].runs_later and "Python" in asked[0].runs_later
    assert not (repo / SITE / "_zz_init.pth").exists()
    assert not python_runs_agent_code(repo)


def test_a_pth_written_in_full_auto_is_named_and_undone(with_venv: Path, tmp_path: Path) -> None:
    """Full-auto writes without asking: the `.pth` is journaled (so undo removes it) and named at the end
    of the task as a file that runs code later."""
    repo = with_venv
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Write", file_path=str(SITE / "_zz_init.pth"), content=PTH), "done")
    workspace, recorder = start(repo, replay, watch=False)
    try:
        workspace.session.run("go")
        assert python_runs_agent_code(repo)  # what the red team saw: the next python runs it
        (repo / "PWNED").unlink()
        named = [n for n in notices(recorder) if "run code on your machine later" in n]
        assert len(named) == 1 and "_zz_init.pth" in named[0]
        undone = workspace.undo_last()
    finally:
        workspace.close()
    assert (SITE / "_zz_init.pth").as_posix() in undone.deleted
    assert not (repo / SITE / "_zz_init.pth").exists()
    assert not python_runs_agent_code(repo)


def test_a_command_writing_into_the_venv_is_named_at_the_end(with_venv: Path, tmp_path: Path) -> None:
    """A command's changes inside an installed environment are outside the journal's budget: named, by
    path, at the end of the task (changed outside the undo journal, and as code that runs later)."""
    repo = with_venv
    command = f"printf %s {json.dumps(PTH)} > {SITE / 'evil.pth'} && touch {SITE / 'helper'} && chmod 4777 {SITE / 'helper'}"
    workspace, recorder = start(repo, write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=command), "done"))
    try:
        summary = workspace.run("go")
    finally:
        workspace.close()
    outside = [n for n in notices(recorder) if n.startswith("changed outside the undo journal")]
    later = [n for n in notices(recorder) if "run code on your machine later" in n]
    assert len(outside) == 1 and (SITE / "evil.pth").as_posix() in outside[0]
    assert len(later) == 1 and "evil.pth" in later[0]
    assert (SITE / "evil.pth").as_posix() in summary.files_changed
    assert stat.S_IMODE((repo / SITE / "helper").stat().st_mode) == 0o775  # setuid and world-write taken off


def test_a_write_over_the_ignored_env_is_undone_and_kept_out_of_the_patch(with_venv: Path, tmp_path: Path) -> None:
    """Hole 2: a Write over the ignored `.env` was not journaled: the user's content was lost for good."""
    repo = with_venv
    replay = write_replay(
        tmp_path / "r.jsonl",
        xml_call("Read", file_path=".env"),
        xml_call("Write", file_path=".env", content="API_TOKEN=replaced-by-the-agent\n"),
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
        "done",
    )
    answers = Answers(approve=True)
    recorder = Recorder()
    workspace = open_workspace(HookedReplay(replay), repo, mode="auto-edit", approver=answers, sink=recorder, watch=False)
    try:
        workspace.session.run("go")
        assert (repo / ".env").read_text() == "API_TOKEN=replaced-by-the-agent\n"
        patch = workspace.patch()
        summary = recorder.of_type("summary")[-1]
        workspace.undo_last()  # the Edit
        workspace.undo_last()  # the Write
    finally:
        workspace.close()
    # auto-edit: the .env write is asked for (issue 41: tools load it into what they run, NODE_OPTIONS,
    # PYTHONSTARTUP...: code that runs later), the calc.py edit is not
    assert [getattr(r, "path", None) for r in answers.requests] == [".env"]
    assert "calc.py" in patch and ".env" not in patch and "replaced-by-the-agent" not in patch
    assert {".env", "calc.py"} <= set(summary.files_changed)  # type: ignore[attr-defined]
    assert (repo / ".env").read_text() == "API_TOKEN=the-users-own\n"


def test_rm_rf_of_ignored_files_is_undone_by_ribbit_undo(with_venv: Path, tmp_path: Path, isolated_state: Path) -> None:
    """Hole 3: a full-auto `rm -rf .env build/` (both ignored): nothing came back."""
    repo = with_venv
    (repo / "build").mkdir()
    (repo / "build" / "cache.o").write_bytes(b"\x7fELF object the user built\n")
    before = {p: b for p, b in tree_bytes(repo).items() if not p.startswith(".venv/")}
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="rm -rf .env build/"), "done")
    run = ribbit_cli(tmp_path, repo, replay, "--mode", "full-auto")
    run.assert_clean_exit()
    assert not (repo / ".env").exists() and not (repo / "build").exists()
    assert {".env", "build/cache.o"} <= set(run.summary()["files_changed"])
    session = re.search(r"session (\S+)", run.err)
    assert session, run.err
    undo = subprocess.run(
        [sys.executable, "-m", "app.cli", "undo", session.group(1), "--repo", str(repo)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert undo.returncode == 0, undo.stderr
    after = {p: b for p, b in tree_bytes(repo).items() if not p.startswith(".venv/")}
    assert after == before


def test_a_command_over_the_write_quota_is_stopped_and_its_step_undone(repo: Path, tmp_path: Path, isolated_state: Path) -> None:
    """Hole 4: a command that overwrote the user's file and filled the disk in the same step left the step
    unrecorded. A session's writes now stop at its quota (sandbox.toml `write_quota_mb`), so the disk keeps
    room for the journal: the step is recorded, and undo brings the user's file back."""
    config = tmp_path / "config"
    (config / "ribbit").mkdir(parents=True)
    (config / "ribbit" / "sandbox.toml").write_text("write_quota_mb = 8\n")
    (repo / "notes.txt").write_text("the user's uncommitted notes\n")
    one_big = "echo overwritten > notes.txt; head -c 64M /dev/zero > fill.bin; echo after"
    many_small = "for i in $(seq 1 64); do head -c 1M /dev/zero > f$i.bin; sleep 0.05; done; echo finished"
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=one_big), xml_call("Bash", command=many_small), "done")
    env_run = dict(os.environ, XDG_CONFIG_HOME=str(config))
    run = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", "do it", "--repo", str(repo), "--model", f"replay:{replay}",
         "--mode", "full-auto", "--transcript", str(tmp_path / "t.jsonl")],
        capture_output=True, text=True, cwd=ROOT, timeout=240, env=env_run,
    )
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    results = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    outputs = [e["message"]["content"] for e in results if e["type"] == "message" and e["message"]["role"] == "tool"]
    assert "File size limit exceeded" in outputs[0] or "write quota" in outputs[0]
    assert "write quota" in outputs[1] and "finished" not in outputs[1]
    written = sum(p.stat().st_size for p in repo.glob("*.bin"))
    assert written <= 12 << 20  # the quota, and what one check interval lets through
    session = re.search(r"session (\S+)", run.stderr)
    assert session, run.stderr
    undo = subprocess.run(
        [sys.executable, "-m", "app.cli", "undo", session.group(1), "--repo", str(repo)],
        capture_output=True, text=True, cwd=ROOT, timeout=120, env=env_run,
    )
    assert undo.returncode == 0, undo.stderr
    assert (repo / "notes.txt").read_text() == "the user's uncommitted notes\n"
    assert not list(repo.glob("*.bin")) and not list(repo.rglob("*.ribbit-tmp"))


DISK_FULL_SCRIPT = r"""
import json, os, subprocess, sys
from pathlib import Path
disk = Path(sys.argv[1])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(disk)], check=True)
repo = disk / "repo"
repo.mkdir()
def git(*args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
git("init", "-q", "-b", "main")
(repo / "calc.py").write_text("x = 1\n")
git("add", "-A")
git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
(repo / "notes.txt").write_text("the user's uncommitted notes\n")
from tests.safety.helpers import start, write_replay
from tests.conftest import xml_call
command = "echo overwritten > notes.txt; head -c 64M /dev/zero > fill.bin; echo filled"
replay = write_replay(Path(sys.argv[2]), xml_call("Bash", command=command), "done")
workspace, recorder = start(repo, replay, watch=True)
workspace.session.run("go")
seen = {"after_run": (repo / "notes.txt").read_text(), "notices": [e.text for e in recorder.of_type("notice")]}
# The repository is on a disk of its own, the overlay's folder elsewhere: the command wrote to the checkout
# directly and its files are uncertain; the user, who knows nobody else wrote, takes them back too.
left = workspace.undo_last()
seen["left"] = sorted(left.uncertain)
undone = workspace.undo_last(uncertain_too=True)
seen["undone"] = undone.model_dump()
seen["after_undo"] = (repo / "notes.txt").read_text()
seen["files"] = sorted(p.name for p in repo.iterdir())
(repo / "later.txt").write_text("room again\n")
seen["later_notices"] = workspace.journal.record_step("later step")
seen["snapshots"] = len(workspace.journal.snapshots)
workspace.close()
print("RESULT " + json.dumps(seen))
"""


def test_a_step_that_fills_the_disk_is_still_undone(tmp_path: Path, isolated_state: Path) -> None:
    """Hole 4, the disk really full (a 6 MiB file system of the test's own, in a user namespace; the
    quota is off): the step cannot be recorded, yet undo compares with the last snapshot that was and
    puts the user's file back; no temp file is left behind."""
    config = tmp_path / "config"
    (config / "ribbit").mkdir(parents=True)
    (config / "ribbit" / "sandbox.toml").write_text("write_quota_mb = 0\n")
    disk = tmp_path / "disk"
    disk.mkdir()
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", sys.executable, "-c", DISK_FULL_SCRIPT, str(disk), str(tmp_path / "r.jsonl")],
        capture_output=True, text=True, cwd=ROOT, timeout=240, env=dict(os.environ, XDG_CONFIG_HOME=str(config)),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert seen["after_run"] == "overwritten\n"
    assert any("could not be recorded" in n for n in seen["notices"]), seen["notices"]
    assert seen["left"] == ["fill.bin", "notes.txt"]  # a plain undo names them and leaves them
    assert seen["after_undo"] == "the user's uncommitted notes\n"
    assert "notes.txt" in seen["undone"]["restored"] and "fill.bin" in seen["undone"]["deleted"]
    assert not [name for name in seen["files"] if name.endswith(".ribbit-tmp") or name.startswith(".ribbit-watch-sync")]
    assert seen["snapshots"] == 2 and not seen["later_notices"]  # the journal goes on once there is room


def test_truncating_the_users_file_past_what_is_recorded_is_undone(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hole 5: `truncate -s 300M` of the user's uncommitted file: undo said it succeeded and left 300 MiB
    of zeros. A file too large to record is now put back from the last snapshot that has it; one that
    never had a recorded copy is named as not restored. Scaled down: a 1 MiB limit."""
    from agent.undo import worktree as snapshot

    monkeypatch.setattr(snapshot, "FILE_HASH_LIMIT", 1 << 20)
    (repo / "notes.txt").write_text("the user's uncommitted notes\n")
    (repo / "big.dat").write_bytes(b"x" * (2 << 20))  # already too large at the start: never recorded
    replay = write_replay(
        tmp_path / "r.jsonl", xml_call("Bash", command="truncate -s 3M notes.txt; printf more >> big.dat"), "done",
    )
    workspace, _ = start(repo, replay, watch=False)
    try:
        workspace.session.run("go")
        assert (repo / "notes.txt").stat().st_size == 3 << 20
        undone = workspace.undo_last()
    finally:
        workspace.close()
    assert (repo / "notes.txt").read_text() == "the user's uncommitted notes\n"
    assert "notes.txt" in undone.restored
    assert [p for p, _why in undone.not_restored] == ["big.dat"]
    assert "NOT restored: big.dat" in undone.summary()


def test_setuid_sticky_and_world_write_bits_a_command_sets_are_taken_off(repo: Path, tmp_path: Path) -> None:
    """Hole 6: `chmod 6755` on a tracked script and `chmod 1777 .` survived the step and undo."""
    tool = repo / "tool.sh"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    git(repo, "add", "tool.sh")
    git(repo, "commit", "-q", "-m", "tool")
    root_mode = stat.S_IMODE(repo.stat().st_mode)
    command = "chmod 6755 tool.sh && chmod 1777 . && chmod o+w calc.py && mkdir -p sub && chmod 2777 sub && touch sub/x"
    workspace, recorder = start(repo, write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=command), "done"))
    try:
        workspace.session.run("go")
        after_step = {
            "tool.sh": stat.S_IMODE(tool.stat().st_mode), ".": stat.S_IMODE(repo.stat().st_mode),
            "calc.py": stat.S_IMODE((repo / "calc.py").stat().st_mode), "sub": stat.S_IMODE((repo / "sub").stat().st_mode),
        }
        named = " ".join(n for n in notices(recorder) if "bits a command set" in n)
        workspace.undo_last()
    finally:
        workspace.close()
    assert after_step["tool.sh"] == 0o755
    assert after_step["."] == root_mode
    assert not after_step["calc.py"] & stat.S_IWOTH
    assert not after_step["sub"] & (stat.S_ISGID | stat.S_IWOTH)
    assert "tool.sh (6755 -> 755)" in named
    assert stat.S_IMODE(tool.stat().st_mode) == 0o755 and stat.S_IMODE(repo.stat().st_mode) == root_mode
    assert not (repo / "sub").exists()


def test_files_changed_counts_what_commands_changed(repo: Path, tmp_path: Path) -> None:
    """Hole 11: `ribbit run` said "files changed: 0" after a command deleted and changed files."""
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="rm test_calc.py && echo '# more' >> calc.py"), "done")
    run = ribbit_cli(tmp_path, repo, replay, "--mode", "full-auto")
    run.assert_clean_exit()
    assert run.summary()["files_changed"] == ["calc.py", "test_calc.py"]
    assert "files changed: 2" in run.err


def test_ignored_files_a_command_creates_are_journaled_with_the_watcher_on(repo: Path, tmp_path: Path) -> None:
    """With inotify the journal lists ignored paths only after the watcher saw one change: a command that
    makes new ignored files (in a recorded ignored folder, and in a new one) must still be undone."""
    (repo / ".gitignore").write_text("build/\n*.log\ncache/\n")
    (repo / "build").mkdir()
    (repo / "build" / "kept.o").write_bytes(b"the user's object\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore cache")
    replay = write_replay(
        tmp_path / "r.jsonl",
        xml_call("Bash", command="echo one >> calc.py"),
        xml_call("Bash", command="echo planted > build/new.key && mkdir -p cache/deep && echo x > cache/deep/y && echo z > run.log"),
        "done",
    )
    workspace, _ = start(repo, replay, watch=True)
    try:
        assert workspace.watcher is not None
        workspace.session.run("go")
        undone = workspace.undo_last()
    finally:
        workspace.close()
    assert {"build/new.key", "cache/deep/y", "run.log"} <= set(undone.deleted)
    assert not (repo / "build" / "new.key").exists() and not (repo / "cache").exists() and not (repo / "run.log").exists()
    assert (repo / "build" / "kept.o").read_bytes() == b"the user's object\n"
