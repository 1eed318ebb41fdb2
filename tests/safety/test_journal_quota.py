"""The journal within the write quota, and a full disk (issue 41, holes 7 and 10), through `ribbit run` and
`ribbit undo` as separate processes: replay model, real git, real bubblewrap, a real file system of the
test's own. Outcomes on disk: the size of `.git`, the user's file after `ribbit undo`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.safety.cli import ROOT

# Runs inside `unshare --user --map-root-user --mount` (no privilege needed): a 6 MiB tmpfs holds the
# repository, `ribbit run` fills it, then `ribbit undo` runs as a process of its own.
FULL_DISK_SCRIPT = r"""
import json, os, subprocess, sys
from pathlib import Path
disk, replay, transcript = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
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
def ribbit(*args):
    proc = subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, timeout=240)
    return {"code": proc.returncode, "out": proc.stdout, "err": proc.stderr}
seen = {"run": ribbit("run", "go", "--repo", str(repo), "--model", f"replay:{replay}", "--mode", "full-auto",
                      "--transcript", transcript)}
seen["after_run"] = (repo / "notes.txt").read_text()
seen["list"] = ribbit("undo", "--list", "--repo", str(repo))
seen["undo"] = ribbit("undo", "--repo", str(repo))
seen["after_undo"] = (repo / "notes.txt").read_text()
seen["files"] = sorted(p.name for p in repo.iterdir())
seen["again"] = ribbit("undo", "--repo", str(repo))
print("RESULT " + json.dumps(seen))
"""


def test_a_step_that_fills_the_disk_is_undone_by_ribbit_undo(tmp_path: Path) -> None:
    """Hole 10: a step that fills the disk made `ribbit run` end "cannot snapshot the working tree ... No
    space left on device", and a later `ribbit undo` said "nothing to undo", though the start snapshot held
    the user's file. The session now stays marked open (written when the task began, while there was
    room): `ribbit undo --list` shows it, `ribbit undo` puts the user's file back and removes the fill."""
    from tests.conftest import xml_call
    from tests.safety.cli import write_replay

    config = tmp_path / "config"
    (config / "ribbit").mkdir(parents=True)
    (config / "ribbit" / "sandbox.toml").write_text("write_quota_mb = 0\n")  # the disk itself is the limit
    disk = tmp_path / "disk"
    disk.mkdir()
    command = "echo overwritten > notes.txt; head -c 64M /dev/urandom > fill.bin; echo filled"
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=command), "done")
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", sys.executable, "-c", FULL_DISK_SCRIPT, str(disk),
         str(replay), str(tmp_path / "t.jsonl")],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env=dict(os.environ, XDG_CONFIG_HOME=str(config), PYTHONPATH=str(ROOT)),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.split("RESULT ", 1)[1])
    run = seen["run"]
    assert seen["after_run"] == "overwritten\n"
    assert run["code"] == 1 and "No space left on device" in run["err"], run["err"][-2000:]
    assert "ribbit undo" in run["err"].strip().splitlines()[-1]
    assert "Traceback" not in run["err"]
    listed = seen["list"]
    assert listed["code"] == 0 and "last step not recorded" in listed["out"], listed
    undo = seen["undo"]
    assert undo["code"] == 0, undo
    assert seen["after_undo"] == "the user's uncommitted notes\n"
    assert seen["files"] == [".git", "calc.py", "notes.txt"], seen["files"]
    assert "notes.txt" in undo["out"] and "fill.bin" in undo["out"]
    assert seen["again"]["code"] == 1 and "nothing to undo" in seen["again"]["err"]  # undone once, listed as undone


MiB = 1 << 20


def git_size(repo: Path) -> int:
    return sum(p.stat().st_size for p in (repo / ".git").rglob("*") if p.is_file())


def on_own_disk(tmp_path: Path, scenario: str, quota_mb: int) -> dict[str, Any]:
    """Run `scenario` (a function below) in a user and mount namespace of its own (no privilege needed),
    its repository on a 256 MiB tmpfs: the write quota measures free space, and on a disk shared with
    other programs their writes would count too. Returns what the scenario saw."""
    config = tmp_path / "config"
    (config / "ribbit").mkdir(parents=True)
    (config / "ribbit" / "sandbox.toml").write_text(f"write_quota_mb = {quota_mb}\n")
    disk = tmp_path / "disk"
    disk.mkdir()
    code = (f"import sys; from tests.safety.test_journal_quota import {scenario}; "
            f"{scenario}(__import__('pathlib').Path(sys.argv[1]), __import__('pathlib').Path(sys.argv[2]))")
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", sys.executable, "-c", code, str(disk), str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=400,
        env=dict(os.environ, XDG_CONFIG_HOME=str(config), PYTHONPATH=str(ROOT)),
    )
    assert proc.returncode == 0 and "RESULT " in proc.stdout, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("RESULT ", 1)[1])  # type: ignore[no-any-return]


def _fresh_repo(disk: Path) -> Path:
    from tests.conftest import git

    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(disk)], check=True)
    repo = disk / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "test@example.com")
    git(repo, "config", "user.name", "Test")
    (repo / "calc.py").write_text("x = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    return repo


def _ribbit_undo(repo: Path, session: str) -> subprocess.CompletedProcess[str]:
    """`ribbit undo --uncertain`: on a disk of its own the repository has no overlay (ribbit's state is elsewhere),
    so what the commands wrote is uncertain, and taken back only when asked."""
    return subprocess.run([sys.executable, "-m", "app.cli", "undo", session, "--uncertain", "--repo", str(repo)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def rewrite_scenario(disk: Path, tmp: Path) -> None:
    """Inside on_own_disk: a tracked 15 MiB random file, then four steps deleting it and four rewriting it."""
    from tests.conftest import git, xml_call
    from tests.safety.cli import ribbit_cli, write_replay

    repo = _fresh_repo(disk)
    data = os.urandom(15 * MiB)
    (repo / "data.bin").write_bytes(data)
    git(repo, "add", "data.bin")
    git(repo, "commit", "-q", "-m", "data")
    before = git_size(repo)
    turns = [xml_call("Bash", command=command) for n in range(1, 5) for command in (
        f"rm data.bin && echo deleted {n}", f"head -c 15M /dev/urandom > data.bin && echo rewritten {n}",
    )]
    run = ribbit_cli(tmp, repo, write_replay(tmp / "r.jsonl", *turns, "done"), "--mode", "full-auto")
    run.assert_clean_exit(0)
    seen: dict[str, Any] = {"results": run.tool_results(), "grown": git_size(repo) - before, "err": run.err}
    undo = _ribbit_undo(repo, run.err.split("ribbit: session ", 1)[1].split()[0])
    seen["undo"] = [undo.returncode, undo.stdout, undo.stderr]
    seen["restored"] = (repo / "data.bin").read_bytes() == data
    print("RESULT " + json.dumps(seen))


@pytest.mark.slow  # rewrites big files until the quota: ~8 s
def test_rewriting_big_files_cannot_grow_the_journal_past_the_quota(tmp_path: Path) -> None:
    """Hole 7: deleting and rewriting 15 MiB random files under a 20 MiB quota grew .git by 60 MiB: a
    command that deletes gives its room back, and the journal's copies were counted nowhere. Now they
    count: the first rewrite leaves 5 MiB of the quota, its 15 MiB copy does not fit, is not made and
    counts as written, and every command after it is stopped. .git grows by at most the quota (0 MiB
    here, 60 before); `ribbit undo` still puts the user's file back from the session's start."""
    seen = on_own_disk(tmp_path, "rewrite_scenario", quota_mb=20)
    results = seen["results"]
    assert results[:2] == ["deleted 1", "rewritten 1"], results
    assert all("write quota" in r and "deleted" not in r and "rewritten" not in r for r in results[2:8]), results
    assert seen["grown"] <= 20 * MiB, seen["grown"] / MiB  # was 60 MiB
    assert seen["undo"][0] == 0, seen["undo"]
    assert seen["restored"]


def new_files_scenario(disk: Path, tmp: Path) -> None:
    """Inside on_own_disk: four steps each making a new 15 MiB random file, each deleted by the next."""
    from tests.conftest import git, xml_call
    from tests.safety.cli import ribbit_cli, write_replay

    repo = _fresh_repo(disk)
    before = git_size(repo)
    turns = [xml_call("Bash", command=command) for n in range(1, 5) for command in (
        "rm -f new*.bin && echo deleted", f"head -c 15M /dev/urandom > new{n}.bin && echo made {n}",
    )]
    run = ribbit_cli(tmp, repo, write_replay(tmp / "r.jsonl", *turns, "done"), "--mode", "full-auto")
    run.assert_clean_exit(0)
    seen: dict[str, Any] = {"results": run.tool_results(), "grown": git_size(repo) - before}
    seen["diffs"] = run.stdout.count(b"diff --git")
    seen["binary"] = b"GIT binary patch" in run.stdout
    clone = tmp / "clone"
    git(tmp, "clone", "-q", str(repo), str(clone))
    (tmp / "p.diff").write_bytes(run.stdout)
    git(clone, "apply", str(tmp / "p.diff"))
    seen["applied_same"] = (clone / "new4.bin").read_bytes() == (repo / "new4.bin").read_bytes()
    undo = _ribbit_undo(repo, run.err.split("ribbit: session ", 1)[1].split()[0])
    seen["undo"] = [undo.returncode, undo.stdout, undo.stderr]
    seen["left"] = sorted(p.name for p in repo.glob("new*.bin"))
    print("RESULT " + json.dumps(seen))


def test_big_files_a_step_creates_are_not_copied_and_the_patch_still_has_them(tmp_path: Path) -> None:
    """Hole 7's other half (and hole 10's 60 MB file): a file a step creates needs no copy to be undone.
    Four steps each making a new 15 MiB random file (each deleted again by the next step) add almost
    nothing to .git and stay within the quota; the patch `ribbit run` prints, read from disk, rebuilds
    the last one byte for byte (`git apply` in a clone); `ribbit undo` removes it."""
    seen = on_own_disk(tmp_path, "new_files_scenario", quota_mb=20)
    assert seen["results"][:8] == ["deleted", "made 1", "deleted", "made 2", "deleted", "made 3", "deleted", "made 4"]
    assert seen["grown"] < 1 * MiB, seen["grown"] / MiB  # was 60 MiB
    assert seen["diffs"] == 1 and seen["binary"]
    assert seen["applied_same"]
    assert seen["undo"][0] == 0, seen["undo"]
    assert seen["left"] == []


def test_a_big_new_file_that_runs_later_is_still_named(repo: Path, tmp_path: Path) -> None:
    """Not copying a big new file must not hide it: a 2 MiB `conftest.py` a command writes (pytest runs it
    on the user's machine later) is named at the end of the task and is in the patch."""
    from tests.conftest import xml_call
    from tests.safety.cli import ribbit_cli, write_replay

    command = "python3 -c \"open('conftest.py', 'w').write('# pad\\n' * 400000 + 'print(1)\\n')\" && echo written"
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=command), "done"),
                     "--mode", "full-auto")
    run.assert_clean_exit(0)
    assert (repo / "conftest.py").stat().st_size > 2 * MiB
    warning = [line for line in run.err.splitlines() if "run code on your machine later" in line]
    assert warning and "conftest.py" in warning[0], run.err[-2000:]
    assert b"+++ b/conftest.py" in run.stdout and run.stdout.count(b"+# pad") == 400000
