"""Issue 40, items 1-3: the user's own edit survives an approval, a command and undo; one writer per
repository. Real `ribbit run` processes, real git, watcher and bubblewrap; outcomes read on disk."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from agent.sandbox.overlay import overlay_works
from tests.conftest import git, xml_call
from tests.safety.cli import ROOT, write_replay

READ_CALC = xml_call("Read", file_path="calc.py")
FIX_ADD = xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b")
USERS_LINE = "# the user's own line, saved by their editor\n"


def ribbit_run(repo: Path, replay: Path, transcript: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "run", "fix add", "--repo", str(repo), "--model", f"replay:{replay}",
         "--transcript", str(transcript), *args],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def read_until(stream, marker: str, timeout: float = 120) -> str:  # type: ignore[no-untyped-def]
    """What the process printed up to and including `marker` (character by character: the question has no newline)."""
    seen = ""
    deadline = time.monotonic() + timeout
    while marker not in seen:
        assert time.monotonic() < deadline, seen[-2000:]
        char = stream.read(1)
        assert char, f"the process ended before {marker!r}: {seen[-2000:]}"
        seen += char
    return seen


def wait_for_event(transcript: Path, found, timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if transcript.exists():
            for line in transcript.read_text().splitlines():
                try:
                    if found(json.loads(line)):
                        return
                except ValueError:
                    continue
        time.sleep(0.05)
    raise AssertionError(f"no such event in {transcript}")


def called(tool: str):  # type: ignore[no-untyped-def]
    """A transcript record of the model's turn that calls `tool` (written before the tool runs)."""
    def found(event: dict) -> bool:  # type: ignore[type-arg]
        message = event.get("message") or {}
        return event["type"] == "message" and message.get("role") == "assistant" and any(
            call["function"]["name"] == tool for call in message.get("tool_calls") or [])
    return found


def summary_of(transcript: Path) -> dict:  # type: ignore[type-arg]
    events = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert events[-1]["type"] == "summary", events[-1]
    return events[-1]


def tool_results(transcript: Path) -> list[str]:
    events = [json.loads(line) for line in transcript.read_text().splitlines()]
    return [e["message"]["content"] for e in events if e["type"] == "message" and e["message"]["role"] == "tool"]


def ribbit_undo(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli", "undo", "--repo", str(repo)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_ask_mode_the_users_save_while_the_diff_waits_survives_the_approval(repo: Path, tmp_path: Path) -> None:
    replay = write_replay(tmp_path / "r.jsonl", READ_CALC, FIX_ADD, "Fixed.")
    transcript = tmp_path / "t.jsonl"
    proc = ribbit_run(repo, replay, transcript, "--mode", "ask")
    try:
        assert proc.stdin is not None and proc.stderr is not None
        first = read_until(proc.stderr, "[y/n/n: reason] ")
        assert "+    return a + b" in first
        with open(repo / "calc.py", "a") as editor:  # the user's editor saves while the diff is on screen
            editor.write(USERS_LINE)
        proc.stdin.write("y\n")
        proc.stdin.flush()
        again = read_until(proc.stderr, "[y/n/n: reason] ")  # asked again, with the new diff
        assert "the user's own line" in again and "+    return a + b" in again
        proc.stdin.write("y\n")
        proc.stdin.close()
        proc.wait(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n" + USERS_LINE
    # Undoing the session never takes the user's line back: the file holds their change, so it is kept and named.
    undone = ribbit_undo(repo)
    assert undone.returncode == 0, undone.stderr
    assert "kept your changes to calc.py" in undone.stdout
    assert (repo / "calc.py").read_text().endswith(USERS_LINE)


def test_ask_mode_a_change_that_no_longer_applies_is_refused_and_the_users_file_kept(repo: Path, tmp_path: Path) -> None:
    replay = write_replay(tmp_path / "r.jsonl", READ_CALC, FIX_ADD, "Stopped.")
    transcript = tmp_path / "t.jsonl"
    proc = ribbit_run(repo, replay, transcript, "--mode", "ask")
    users = "def add(a, b):\n    return b - a  # rewritten by the user\n"
    try:
        assert proc.stdin is not None and proc.stderr is not None
        read_until(proc.stderr, "[y/n/n: reason] ")
        (repo / "calc.py").write_text(users)
        proc.stdin.write("y\n")
        proc.stdin.close()
        proc.wait(timeout=120)
    finally:
        proc.kill()
    assert (repo / "calc.py").read_text() == users
    assert any(r.startswith("Error: calc.py changed while the change waited for approval") for r in tool_results(transcript))


def append_during_the_command(repo: Path, replay: Path, transcript: Path, *args: str) -> None:
    """A full-auto `ribbit run` whose Bash sleeps; the user's editor appends USERS_LINE to calc.py meanwhile."""
    proc = ribbit_run(repo, replay, transcript, "--mode", "full-auto", *args)
    try:
        wait_for_event(transcript, called("Bash"))
        time.sleep(1.0)  # inside the sleep
        with open(repo / "calc.py", "a") as editor:
            editor.write(USERS_LINE)
        proc.wait(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""


def test_the_users_edit_during_a_command_is_not_the_agents_and_undo_leaves_it(repo: Path, tmp_path: Path) -> None:
    assert overlay_works(), "this system cannot mount the overlay that keeps a command's writes apart"
    replay = write_replay(
        tmp_path / "r.jsonl", READ_CALC, xml_call("Bash", command="sleep 4; echo built > out.txt"), FIX_ADD, "Done.",
    )
    transcript = tmp_path / "t.jsonl"
    append_during_the_command(repo, replay, transcript)
    results = tool_results(transcript)
    assert any("modified since read" in r for r in results)  # the Edit was refused, as before
    assert (repo / "out.txt").read_text() == "built\n"
    assert summary_of(transcript)["files_changed"] == ["out.txt"]  # the user's change is not counted
    undone = ribbit_undo(repo)  # a separate process, after the session
    assert undone.returncode == 0, undone.stderr
    assert not (repo / "out.txt").exists()  # the command's own change is taken back ...
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n" + USERS_LINE  # ... the user's is not


def test_without_the_overlay_what_changed_while_a_command_ran_is_named_and_left_by_undo(repo: Path, tmp_path: Path) -> None:
    """--no-sandbox (as on a system without the overlay): the command writes to the checkout directly, so a
    file changed while it ran may be the command's or the user's. Undo names those files and leaves them;
    the agent's own Write is still taken back."""
    replay = write_replay(
        tmp_path / "r.jsonl", xml_call("Write", file_path="new.txt", content="from the agent\n"), READ_CALC,
        xml_call("Bash", command="sleep 4; echo built > out.txt"), "Done.",
    )
    append_during_the_command(repo, replay, tmp_path / "t.jsonl", "--no-sandbox")
    assert (repo / "out.txt").read_text() == "built\n" and (repo / "new.txt").exists()
    undone = ribbit_undo(repo)
    assert undone.returncode == 0, undone.stderr
    assert not (repo / "new.txt").exists()  # the agent's Write: taken back
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n" + USERS_LINE  # the user's line stays
    assert (repo / "out.txt").read_text() == "built\n"  # whose it is cannot be told: left ...
    named = undone.stdout + undone.stderr
    assert "cannot tell" in named and "calc.py" in named and "out.txt" in named, named  # ... and named


def test_uncertain_files_are_taken_back_only_when_asked(repo: Path, tmp_path: Path) -> None:
    """The user who knows nobody else wrote while the command ran: after the plain undo, `ribbit undo
    --uncertain` takes back just the files it left, once."""
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="echo built > out.txt; echo x >> calc.py"), "Done.")
    proc = ribbit_run(repo, replay, tmp_path / "t.jsonl", "--mode", "full-auto", "--no-sandbox")
    proc.communicate(timeout=180)
    assert proc.returncode == 0
    plain = ribbit_undo(repo)
    assert plain.returncode == 0, plain.stderr
    assert (repo / "out.txt").exists() and (repo / "calc.py").read_text().endswith("x\n")  # left
    asked = subprocess.run([sys.executable, "-m", "app.cli", "undo", "--uncertain", "--repo", str(repo)],
                           capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert asked.returncode == 0, asked.stderr
    assert not (repo / "out.txt").exists() and (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
    again = subprocess.run([sys.executable, "-m", "app.cli", "undo", "--uncertain", "--repo", str(repo)],
                           capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert again.returncode == 1 and "no uncertain file" in again.stderr


def test_a_second_session_in_the_repository_is_told_and_does_not_write(repo: Path, tmp_path: Path) -> None:
    first_replay = write_replay(tmp_path / "a.jsonl", xml_call("Bash", command="sleep 6"), "Done.")
    first_transcript = tmp_path / "a.jsonl.t"
    first = ribbit_run(repo, first_replay, first_transcript, "--mode", "full-auto")
    try:
        wait_for_event(first_transcript, called("Bash"))
        second_replay = write_replay(
            tmp_path / "b.jsonl", xml_call("Write", file_path="second.txt", content="from the second session\n"),
            xml_call("Bash", command="echo x > by_command.txt"), "Done.",
        )
        second_transcript = tmp_path / "b.jsonl.t"
        second = ribbit_run(repo, second_replay, second_transcript, "--mode", "full-auto")
        _out, err = second.communicate(timeout=180)
        assert first.poll() is None  # the first one still holds the checkout
    finally:
        first.wait(timeout=180)
    assert "another ribbit session" in err and f"pid {first.pid}" in err
    assert not (repo / "second.txt").exists() and not (repo / "by_command.txt").exists()
    results = tool_results(second_transcript)
    assert results[0].startswith("Error: another ribbit session")
    assert "ran read-only" in results[1]
    # Once the first has ended, a new session writes as usual.
    third = ribbit_run(repo, second_replay, tmp_path / "c.t", "--mode", "full-auto")
    _out, err = third.communicate(timeout=180)
    assert third.returncode == 0 and "another ribbit session" not in err
    assert (repo / "second.txt").read_text() == "from the second session\n"
    git(repo, "status")  # the repository is intact
