"""The journal within the write quota, and a full disk (issue 41, holes 7 and 10), through `ribbit run` and
`ribbit undo` as separate processes: replay model, real git, real bubblewrap, a real file system of the
test's own. Outcomes on disk: the size of `.git`, the user's file after `ribbit undo`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
