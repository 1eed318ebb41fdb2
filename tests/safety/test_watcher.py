"""Outside edits during a session: the file goes stale, the model gets a note, the transcript an event."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from agent.session.transcript import TranscriptWriter, fanout
from agent.undo.watcher import ExternalChange, RepoWatcher
from agent.session.workspace import open_workspace
from tests.conftest import git, xml_call
from tests.safety.helpers import HookedReplay, Recorder, YesApprover, tool_outputs, write_replay


def test_outside_edit_makes_the_file_stale_and_tells_the_model(repo: Path, tmp_path: Path) -> None:
    calc = repo / "calc.py"
    turns = [
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),  # refused: stale
        xml_call("Read", file_path="calc.py"),
        xml_call("Edit", file_path="calc.py", old_string="a * b", new_string="a + b"),  # the agent's own edit
        xml_call("Bash", command="echo by-bash > bash.txt"),  # the agent's own command
        "done",
    ]
    reported = threading.Event()
    recorder = Recorder()
    transcript = tmp_path / "transcript.jsonl"
    writer = TranscriptWriter(transcript)

    def sink(event):  # type: ignore[no-untyped-def]
        if event.type == "external_change":
            reported.set()
        recorder(event)
        writer(event)

    def user_edits_calc() -> None:
        # Same size and same mtime as what the agent read: only the watcher can tell it changed.
        st = calc.stat()
        calc.write_text(calc.read_text().replace("a - b", "a * b"))
        os.utime(calc, ns=(st.st_atime_ns, st.st_mtime_ns))
        (repo / "build").mkdir(exist_ok=True)
        (repo / "build" / "out.o").write_text("ignored")
        (repo / "debug.log").write_text("ignored")
        git(repo, "update-ref", "refs/heads/other", "HEAD")  # inside .git/
        assert reported.wait(10), "the watcher never reported the outside change"

    model = HookedReplay(write_replay(tmp_path / "r.jsonl", *turns), {1: user_edits_calc})
    workspace = open_workspace(model, repo, mode="full-auto", approver=YesApprover(), sink=fanout([sink]))
    try:
        assert workspace.watcher is not None and workspace.watcher.method == "inotify"
        workspace.session.run("fix add")
        assert workspace.watcher.wait_idle()
    finally:
        workspace.close()
        writer.close()
    outputs = tool_outputs(recorder)
    assert outputs[1].startswith("Error:") and "modified since read" in outputs[1]
    assert outputs[3].startswith("Edited calc.py")
    assert calc.read_text() == "def add(a, b):\n    return a + b\n"
    # The note reaches the model with the results of the turn after the outside edit.
    tool_messages = [m.content for m in workspace.session.messages if m.role == "tool"]
    assert "changed outside the agent" in tool_messages[1] and "calc.py" in tool_messages[1]
    assert not any("changed outside the agent" in m for m in tool_messages[2:])
    # Exactly one external_change event, for calc.py only: not the ignored files, not .git/,
    # not the agent's own Edit or Bash.
    events = [json.loads(line) for line in transcript.read_text().splitlines()]
    external = [e for e in events if e["type"] == "external_change"]
    assert external == [{"type": "external_change", "paths": ["calc.py"]}]


def test_polling_fallback_still_reports_changes(repo: Path) -> None:
    seen: list[ExternalChange] = []
    got = threading.Event()

    def on_change(change: ExternalChange) -> None:
        seen.append(change)
        got.set()

    watcher = RepoWatcher(repo, on_change, force_polling=True)
    message = watcher.start()
    try:
        assert watcher.method == "polling" and "polling" in message
        (repo / "test_calc.py").unlink()
        assert got.wait(15)
    finally:
        watcher.stop()
    assert seen[0].paths == ["test_calc.py"] and seen[0].deleted == ["test_calc.py"]


def test_tree_too_big_for_inotify_falls_back_to_polling(repo: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for i in range(12):
        (repo / f"d{i}").mkdir()
    monkeypatch.setattr("agent.undo.watcher.inotify_watch_limit", lambda: 10)
    watcher = RepoWatcher(repo, lambda change: None)
    message = watcher.start()
    watcher.stop()
    assert watcher.method == "polling" and "inotify allows 10 watches" in message


def test_ribbits_own_writes_and_removals_are_never_outside_changes(repo: Path) -> None:
    """Recognised before the rename lands, so a slow fsync cannot make the agent's write look foreign."""
    from agent.fs import atomic_write, remove_file

    seen: list[ExternalChange] = []
    got = threading.Event()

    def on_change(change: ExternalChange) -> None:
        seen.append(change)
        got.set()

    watcher = RepoWatcher(repo, on_change)
    watcher.start()
    try:
        atomic_write(repo / "calc.py", b"def add(a, b):\n    return a + b\n", observer=watcher)  # no agent_wrote
        remove_file(repo / "test_calc.py", observer=watcher)
        (repo / "user.txt").write_text("from outside\n")
        assert got.wait(10)
        assert watcher.wait_idle()
    finally:
        watcher.stop()
    assert [c.paths for c in seen] == [["user.txt"]]


def test_outside_change_while_idle_reaches_the_next_task(repo: Path, tmp_path: Path) -> None:
    reported = threading.Event()
    recorder = Recorder()

    def sink(event):  # type: ignore[no-untyped-def]
        recorder(event)
        if event.type == "external_change":
            reported.set()

    model = HookedReplay(write_replay(tmp_path / "r.jsonl", "first answer", "second answer"))
    workspace = open_workspace(model, repo, mode="full-auto", approver=YesApprover(), sink=sink)
    try:
        workspace.session.run("first task")
        (repo / "calc.py").write_text("# edited between two tasks\n")
        assert reported.wait(10)
        workspace.session.run("second task")
    finally:
        workspace.close()
    users = [m.content for m in workspace.session.messages if m.role == "user"]
    assert users[0] == "first task"
    assert users[1].startswith("second task") and "changed outside the agent" in users[1] and "calc.py" in users[1]


def test_outside_changes_are_still_noticed_after_the_agent_makes_a_2000_deep_tree(
    repo: Path, tmp_path: Path, removes_deep_trees: None
) -> None:
    """watchdog's inotify thread recurses into new folders and dies on such a tree: ribbit polls instead."""
    turns = [
        xml_call("Bash", command="python3 -c \"import os\nfor _ in range(2000):\n    os.mkdir('d'); os.chdir('d')\""),
        xml_call("Bash", command="true"),
        "done",
    ]
    reported = threading.Event()
    seen: list[list[str]] = []

    def sink(event):  # type: ignore[no-untyped-def]
        if event.type == "external_change":
            seen.append(event.paths)
            reported.set()

    def wait_for_the_watcher() -> None:
        # The inotify thread dies while it walks the new tree; the end of the agent's command or the
        # next health check (2 s) puts polling in its place. A change made before polling has taken its
        # first look is part of its baseline, so the user writes once a poll has run (sync).
        # Through the overlay (agent.sandbox.overlay) ribbit makes the tree itself, a folder at a time, and
        # inotify keeps up; a command making it directly kills watchdog's thread, and polling takes over.
        watcher = workspace.watcher
        assert watcher is not None
        deadline = time.monotonic() + 120  # a loaded machine walks 2,000 folders slowly
        while not overlay and watcher.method != "polling" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert overlay or watcher.method == "polling", "the dead inotify thread was never replaced"
        assert watcher.sync(), "the observer never delivered the marker's event"
        (repo / "by-user.txt").write_text("written while the agent worked\n")

    workspace = open_workspace(
        HookedReplay(write_replay(tmp_path / "r.jsonl", *turns), {1: wait_for_the_watcher}), repo,
        mode="full-auto", approver=YesApprover(), sink=sink,
    )
    overlay = workspace.runner.inner.isolates_writes("read-write")  # type: ignore[attr-defined]
    try:
        assert workspace.watcher is not None and workspace.watcher.method == "inotify"
        workspace.session.run("go")
        assert reported.wait(15), "the change made outside the agent was never noticed"
        assert ["by-user.txt"] in seen
        assert (repo / "d" / "d" / "d").is_dir()  # the tree was made
        assert overlay or workspace.watcher.method == "polling"
    finally:
        workspace.close()


def test_a_tree_too_deep_for_inotify_is_polled_from_the_start(tmp_path: Path, removes_deep_trees: None) -> None:
    from agent.session.diagnostics import agent_checks

    root = tmp_path / "deep"
    folder = root
    folder.mkdir()
    before = os.getcwd()
    os.chdir(folder)
    try:
        for _ in range(1500):
            os.mkdir("d")
            os.chdir("d")
    finally:
        os.chdir(before)  # not tmp_path: the fixture removes it, and a deleted cwd breaks later tests
    assert all(check.name for check in agent_checks(root))  # `ribbit doctor` measures it without a crash
    watcher = RepoWatcher(root, lambda change: None)
    try:
        assert "more than 200 folders deep" in watcher.start()
        assert watcher.method == "polling"
    finally:
        watcher.stop()


def test_the_agents_write_then_its_command_on_the_same_file_are_not_outside_changes(repo: Path) -> None:
    """A Write whose event is still waiting (debounce) when the agent's next command changes the same
    file is judged by content before the command runs, so neither counts as an outside change (the
    command, writing to the checkout directly, leaves the file uncertain)."""
    from agent.fs import atomic_write
    from agent.sandbox.runner import LocalRunner
    from agent.session.watched_runner import WatchedRunner

    seen: list[ExternalChange] = []
    watcher = RepoWatcher(repo, seen.append, debounce_s=30.0)  # the Write's event waits in the batch
    watcher.start()
    runner = WatchedRunner(LocalRunner(repo), watcher)
    try:
        atomic_write(repo / "calc.py", b"one\n", observer=watcher)
        watcher.agent_wrote(repo / "calc.py")
        deadline = time.monotonic() + 10
        while not watcher._pending and time.monotonic() < deadline:  # noqa: SLF001 (the event has arrived)
            time.sleep(0.01)
        assert watcher._pending  # noqa: SLF001
        runner.run("echo two >> calc.py", repo, 30, threading.Event())
        changes = watcher.take_since_snapshot()
    finally:
        runner.close()
        watcher.stop()
    assert (repo / "calc.py").read_bytes() == b"one\ntwo\n"
    # A command writing to the checkout directly (no overlay here): its change is uncertain, never outside.
    assert changes[:3] == (set(), set(), {"calc.py"})
    assert changes.written == {"calc.py"}  # ribbit's own Write (where the journal looks for FIFOs), not the command's
    assert seen == []


def test_a_command_whose_events_arrive_late_stays_in_its_window(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a loaded machine the observer can deliver a command's events after the grace has run out:
    the end of the command waits for a marker's event behind them (the observer keeps order), so they
    still fall in the command's window (uncertain: undo names and keeps them), never outside changes."""
    from agent.sandbox.runner import LocalRunner
    from agent.session.watched_runner import WatchedRunner
    from agent.undo import watcher as watching

    AGENT_GRACE_S = 0.1  # a fifth of ribbit's: the same order of events, each delivery late by twice it
    monkeypatch.setattr(watching, "AGENT_GRACE_S", AGENT_GRACE_S)

    seen: list[ExternalChange] = []
    watcher = RepoWatcher(repo, seen.append)
    watcher.start()
    record = watcher._record  # noqa: SLF001

    def slow_observer(paths: list[str]) -> None:  # the observer thread, late by twice the grace
        time.sleep(2 * AGENT_GRACE_S)
        record(paths)

    watcher._record = slow_observer  # type: ignore[method-assign]  # noqa: SLF001
    runner = WatchedRunner(LocalRunner(repo), watcher)
    try:
        runner.run("echo two >> calc.py", repo, 30, threading.Event())
        time.sleep(3 * AGENT_GRACE_S)  # anything still undelivered would now arrive as an outside change
        changes = watcher.take_since_snapshot()
    finally:
        runner.close()
        watcher.stop()
    assert (repo / "calc.py").read_bytes().endswith(b"two\n")
    assert changes == (set(), set(), {"calc.py"}, set())  # the command's window: uncertain, not outside
    assert seen == []
    assert not [p for p in os.listdir(repo) if p.startswith(".ribbit-watch-sync.")]  # the marker is gone
