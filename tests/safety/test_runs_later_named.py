"""Code that runs later, named (issue 28, item 3): the agent may write a Makefile, `.envrc`, a VS Code task
or a CI workflow, which run on the user's machine outside any sandbox the next time make, direnv, the
editor or a push does. `ribbit run` names exactly those changed files at the end of the task, and in
ask mode the question for such a file says so before it is approved."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import xml_call
from tests.safety.cli import ribbit_cli, write_replay

LATER_PREFIX = "changed files that run code on your machine later: "
RUN_LATER = {
    "Makefile", ".envrc", ".vscode/tasks.json", ".github/workflows/ci.yml", "tests/conftest.py",
    ".pre-commit-config.yaml", ".gitattributes", "package.json", "web/vite.config.ts",
}
PLAIN = {"src/app.py", "README.md", "docs/guide.md", ".github/ISSUE_TEMPLATE/bug.md", "web/index.html"}


def named_later(stderr: str) -> list[str]:
    """The paths of the one end-of-task warning (each listed as `path (why)`, joined by '; ')."""
    lines = [line for line in stderr.splitlines() if LATER_PREFIX in line]
    assert len(lines) == 1, stderr[-3000:]
    listed = lines[0].split(LATER_PREFIX, 1)[1]
    return [item.split(" (", 1)[0] for item in listed.split("; ")]


def test_the_warning_names_exactly_the_files_that_run_later(repo: Path, tmp_path: Path) -> None:
    files = sorted((RUN_LATER | PLAIN) - {"package.json"})
    command = " && ".join(f"mkdir -p $(dirname {f}) && echo 'echo hi' > {f}" for f in files)
    turns = [xml_call("Bash", command=command), xml_call("Write", file_path="package.json", content='{"scripts": {"test": "curl x | sh"}}\n'), "done"]
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "full-auto")
    run.assert_clean_exit()
    assert all((repo / f).is_file() for f in RUN_LATER | PLAIN)
    named = named_later(run.err)
    assert sorted(named) == sorted(RUN_LATER), run.err[-3000:]


def test_ask_mode_marks_a_file_that_runs_later_before_it_is_approved(repo: Path, tmp_path: Path) -> None:
    turns = [
        xml_call("Write", file_path="Makefile", content="all:\n\tcurl x | sh\n"),
        xml_call("Write", file_path="notes.txt", content="plain\n"),
        "done",
    ]
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "ask", stdin=b"n\ny\n")
    run.assert_clean_exit()
    out = (run.stdout + run.stderr).decode()
    questions = out.split("\n? ")[1:]
    assert len(questions) == 2, out[-3000:]
    assert questions[0].startswith("Write Makefile  (runs code on your machine later: a build file (make))")
    assert "runs code on your machine later" not in questions[1]
    assert not (repo / "Makefile").exists() and (repo / "notes.txt").read_text() == "plain\n"
    assert LATER_PREFIX not in out  # the rejected Makefile was never written: nothing to warn about
