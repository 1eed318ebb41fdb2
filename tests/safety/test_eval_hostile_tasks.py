"""`ribbit eval` on hostile task files (issue 41, holes 5 and 6), through the real command line: replay
model, real git, real bubblewrap. Outcomes on disk: what the output folder holds, the host file the
grading would have overwritten, the saved result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import xml_call
from tests.eval.oracle import write_replay
from tests.safety.cli import ROOT

SECRET = "-----BEGIN OPENSSH PRIVATE KEY-----\nribbit-test-key-41\n"


def ribbit_eval(tasks: Path, model: str, out: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "eval", str(tasks), "--model", model, "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=300, env=env,
    )


def task_file(folder: Path, repo: str, **extra: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.json").write_text(json.dumps({
        "repo": repo, "problem_statement": "read the keys", "test_commands": ["true"], **extra,
    }))
    return folder


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home folder with the files hole 5 reached: an SSH key and git's credential store."""
    home = tmp_path / "outer" / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(SECRET)
    (home / ".git-credentials").write_text("https://alice:ribbit-test-token-41@example.com\n")
    (home / "project").mkdir()
    return home


@pytest.mark.parametrize("spelling", ["~", "link to home", "folder holding home", "/"])
def test_a_task_whose_repository_is_home_is_refused(tmp_path: Path, home: Path, spelling: str) -> None:
    """Hole 5: `"repo": "~"` committed the home folder into the agent's worktree and the model read
    .ssh/id_rsa there. The task file is refused with one line, before anything is committed or run."""
    (tmp_path / "home-link").symlink_to(home)
    repo = {"~": "~", "link to home": str(tmp_path / "home-link"), "folder holding home": str(home.parent), "/": "/"}[spelling]
    tasks = task_file(tmp_path / "tasks" / "steal", repo)
    model = write_replay(tmp_path / "r.jsonl", [xml_call("Bash", command="cat .ssh/id_rsa"), "done"])
    out = tmp_path / "out"
    run = ribbit_eval(tasks, f"replay:{model}", out, env=dict(os.environ, HOME=str(home)))
    assert run.returncode == 1, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ribbit eval: error:"), run.stderr
    assert "not a project" in lines[0] and "task's repository" in lines[0]
    assert "Traceback" not in run.stderr
    # Nothing committed, no worktree, no transcript: the output folder was never made.
    assert not out.exists()
    assert SECRET not in run.stdout + run.stderr


def test_a_project_below_home_is_still_a_task_repository(tmp_path: Path, home: Path) -> None:
    """The refusal is the home folder itself, not everything in it: a project below home loads."""
    (home / "project" / "calc.py").write_text("x = 1\n")
    tasks = task_file(tmp_path / "tasks" / "fine", "~/project")
    model = write_replay(tmp_path / "r.jsonl", ["done"])
    run = ribbit_eval(tasks, f"replay:{model}", tmp_path / "out", env=dict(os.environ, HOME=str(home)))
    assert run.returncode == 0, run.stderr
    result = json.loads(next((tmp_path / "out" / "results").rglob("fine.json")).read_text())
    assert result["outcome"] == "no_patch"


HIDDEN_TEST = (
    "import unittest\n\nfrom calc.core import add\n\n\nclass AddTest(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)


def test_a_patch_that_makes_a_folder_a_link_cannot_steer_the_hidden_tests(tmp_path: Path) -> None:
    """Hole 6: the model's patch replaced the non-test folder `calc/` by a link to a folder outside;
    copying the hidden test `calc/test_core.py` back wrote through it and overwrote a host file. Now the
    hidden tests are written one folder at a time without following links: the host file is untouched,
    and the job is graded as not resolved, its result saved."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "__init__.py").write_text("")
    (host / "core.py").write_text("def add(a, b):\n    return a + b\n")
    (host / "test_core.py").write_text("the user's own file\n")
    folder = tmp_path / "tasks" / "link"
    (folder / "repo" / "calc").mkdir(parents=True)
    (folder / "repo" / "calc" / "__init__.py").write_text("")
    (folder / "repo" / "calc" / "core.py").write_text("def add(a, b):\n    return a - b\n")
    (folder / "hidden" / "calc").mkdir(parents=True)
    (folder / "hidden" / "calc" / "test_core.py").write_text(HIDDEN_TEST)
    task_file(folder, "repo", test_commands=["python -m unittest -v calc.test_core"],
              fail_to_pass=["calc.test_core.AddTest.test_add"])
    command = f"rm -r calc && ln -s {host} calc && echo linked"
    model = write_replay(tmp_path / "r.jsonl", [xml_call("Bash", command=command), "done"])
    out = tmp_path / "out"
    run = ribbit_eval(folder, f"replay:{model}", out)
    assert "Traceback" not in run.stderr, run.stderr
    assert (host / "test_core.py").read_text() == "the user's own file\n"
    assert sorted(p.name for p in host.iterdir()) == ["__init__.py", "core.py", "test_core.py"]
    result = json.loads(next((out / "results").rglob("link.json")).read_text())
    assert "calc" in result["patch"] and "new file mode 120000" in result["patch"]  # the link was the patch's
    assert result["outcome"] == "tests_fail", result
    assert "link" in result["message"] and "calc" in result["message"]
    assert run.returncode == 0, run.stderr


def test_a_link_in_the_hidden_tests_is_not_followed(tmp_path: Path, home: Path) -> None:
    """The hidden tests are the task's: a link among them (to a home file) is refused, not copied into the
    worktree where the tests' output could show it."""
    folder = tmp_path / "tasks" / "hidden-link"
    (folder / "repo").mkdir(parents=True)
    (folder / "repo" / "calc.py").write_text("x = 1\n")
    (folder / "hidden").mkdir()
    (folder / "hidden" / "test_key.py").symlink_to(home / ".ssh" / "id_rsa")
    task_file(folder, "repo", test_commands=["cat test_key.py"])
    model = write_replay(tmp_path / "r.jsonl", [xml_call("Bash", command="echo x = 2 > calc.py"), "done"])
    out = tmp_path / "out"
    run = ribbit_eval(folder, f"replay:{model}", out)
    assert "Traceback" not in run.stderr, run.stderr
    result = json.loads(next((out / "results").rglob("hidden-link.json")).read_text())
    assert result["outcome"] == "error" and "plain files" in result["message"], result
    assert not any(SECRET in p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())
