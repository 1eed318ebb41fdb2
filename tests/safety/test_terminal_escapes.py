"""Hole 7: model-chosen text reaches the terminal escaped, so it cannot redraw ribbit's own prompts.

Each attack runs `ribbit run` as a subprocess (real git, real bubblewrap, replayed model) and looks at
the bytes the user's terminal got, and at the files on disk.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import git, xml_call
from tests.safety.cli import RAW_CONTROLS, ROOT, ribbit_cli, ribbit_cli_on_tty, write_replay

# Shows `? run in . (sandboxed): ls -la` on a terminal that obeys escapes; runs `rm -f notes.txt`.
FAKE_PROMPT = "rm -f notes.txt; : '\r\x1b[2K\x1b[1A\x1b[2K\r? run in . (sandboxed): ls -la'"
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil\u2066"


def with_notes(repo: Path) -> Path:
    (repo / "notes.txt").write_text("my notes\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-qm", "notes")
    return repo / "notes.txt"


def test_a_command_cannot_redraw_the_approval_prompt(repo: Path, tmp_path: Path) -> None:
    notes = with_notes(repo)
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=FAKE_PROMPT), "done")
    run = ribbit_cli(tmp_path, repo, replay, "--mode", "ask", stdin=b"n\n")
    run.assert_clean_exit(0)
    assert not RAW_CONTROLS.search(run.stderr), run.stderr
    # What the user was asked about is the real command, escapes shown as text.
    assert "? run in . (sandboxed: the repository writable (not .git), no network): rm -f notes.txt; : '\\r\\x1b[2K\\x1b[1A\\x1b[2K\\r? run in" in run.err
    assert notes.read_text() == "my notes\n"
    assert [e["decision"] for e in run.events if e["type"] == "approval"] == ["rejected"]


def test_a_multi_line_command_cannot_pose_as_a_second_question(repo: Path, tmp_path: Path) -> None:
    notes = with_notes(repo)
    command = "true\n? run in . (sandboxed): ls -la\n  [y/n/n: reason] approved\nrm -f notes.txt"
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command=command), "done")
    run = ribbit_cli(tmp_path, repo, replay, "--mode", "ask", stdin=b"n\n")
    run.assert_clean_exit(0)
    lines = run.err.splitlines()
    assert sum(line.startswith("? run in") for line in lines) == 1
    assert "  | ? run in . (sandboxed): ls -la" in lines and "  | rm -f notes.txt" in lines
    assert notes.read_text() == "my notes\n"


def test_escapes_in_text_paths_diffs_results_and_notices_are_shown_escaped(repo: Path, tmp_path: Path) -> None:
    (repo / "readme.txt").write_text(f"title {ESCAPES}\nsecond line\n")
    turns = [
        f"Let me look {ESCAPES}\n" + xml_call("Read", file_path="readme.txt"),
        f"<tool_call>\n<function=Re{ESCAPES}ad>\n</function>\n</tool_call>",  # malformed: a notice quotes it
        xml_call("Write", file_path=f"new{ESCAPES}.txt", content=f"line {ESCAPES}\n"),
        xml_call("Bash", command=f"printf 'out \\033[2J \\033]0;t\\007\\n'; echo {ESCAPES!r}"),
        f"done {ESCAPES}",
    ]
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "ask", stdin=b"n\nn\n")
    run.assert_clean_exit(0)
    assert not RAW_CONTROLS.search(run.stderr), [m.group() for m in RAW_CONTROLS.finditer(run.stderr)]
    err = run.err
    shown = "\\x1b]0;pwned\\a\\x1b[2J\\x9b31m\\u202eevil\\u2066"
    assert f"Let me look {shown}" in err  # the model's words
    assert f"title {shown}" in err  # a tool result's first line (file content)
    assert f"? Write new{shown}.txt" in err and f"+line {shown}" in err  # the diff to approve
    assert f"ribbit: warning: malformed tool call: <function=Re{shown}ad> is not a valid tool name" in err
    assert f"done {shown}" in err
    assert not list(repo.glob("new*"))  # rejected: nothing written


def test_the_patch_keeps_its_bytes_in_a_pipe_and_is_escaped_on_a_terminal(repo: Path, tmp_path: Path) -> None:
    start = tmp_path / "start"
    shutil.copytree(repo, start)
    turns = [
        xml_call("Write", file_path="esc.txt", content="a \x1b[31mred\x1b[0m \x9b1m\n"),
        xml_call("Bash", command="printf 'caf\\351\\n' > latin1.txt"),  # not UTF-8: git's bytes in the patch
        "done",
    ]
    replay = write_replay(tmp_path / "r.jsonl", *turns)
    run = ribbit_cli(tmp_path, repo, replay, "--mode", "full-auto")
    run.assert_clean_exit(0)
    assert b"+a \x1b[31mred\x1b[0m \xc2\x9b1m" in run.stdout and b"+caf\xe9" in run.stdout
    patch = tmp_path / "session.patch"
    patch.write_bytes(run.stdout)
    subprocess.run(["git", "-C", str(start), "apply", str(patch)], check=True)
    assert (start / "latin1.txt").read_bytes() == b"caf\xe9\n"
    assert (start / "esc.txt").read_bytes() == (repo / "esc.txt").read_bytes()

    for rel in ("esc.txt", "latin1.txt"):
        (repo / rel).unlink()
    screen = ribbit_cli_on_tty(tmp_path, repo, replay, "--mode", "full-auto")
    screen.assert_clean_exit(0)
    assert not RAW_CONTROLS.search(screen.stdout), screen.stdout
    assert b"+a \\x1b[31mred\\x1b[0m \\x9b1m" in screen.stdout and b"+caf\\udce9" in screen.stdout


def test_undo_list_shows_agent_made_names_escaped(repo: Path, tmp_path: Path) -> None:
    name = "bad\x1b]0;pwned\x07name.txt"
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Write", file_path=name, content="x\n"), "done")
    ribbit_cli(tmp_path, repo, replay, "--mode", "full-auto").assert_clean_exit(0)
    assert (repo / name).exists()
    listed = subprocess.run(
        [sys.executable, "-m", "app.cli", "undo", "--list", "--repo", str(repo)], capture_output=True,
        cwd=ROOT, timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert not RAW_CONTROLS.search(listed.stdout + listed.stderr)
    assert b"bad\\x1b]0;pwned\\aname.txt" in listed.stdout
