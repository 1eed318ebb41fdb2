"""Escape attempts: every one fails, and the model is told. Runs the real bubblewrap sandbox."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from agent.sandbox.runner import BwrapRunner, LocalRunner, bwrap_works
from agent.session.workspace import SetupError
from tests.conftest import xml_call
from tests.safety.helpers import start, tool_outputs, write_replay


def test_bubblewrap_sandbox_is_installed_and_works() -> None:
    ok, why = bwrap_works()
    assert ok, f"the Bash sandbox must work here (CI installs bubblewrap): {why}"


@pytest.fixture
def listener():
    """A TCP server on 127.0.0.1 that records whether anyone connected."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    connected = threading.Event()
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                connected.set()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], connected
    stop.set()
    thread.join()
    server.close()


@pytest.fixture
def outside() -> Path:
    """A folder outside the repository and outside /tmp (which the sandbox replaces)."""
    folder = Path(tempfile.mkdtemp(prefix="ribbit-outside-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.xdist_group("loopback_ports")  # its listener may take a port another file dials as a closed one
def test_escape_attempts_all_fail_and_are_reported(repo: Path, tmp_path: Path, listener, outside: Path) -> None:
    port, connected = listener
    home_target = Path.home() / f"ribbit-escape-{os.getpid()}"
    (repo / "out").symlink_to(outside)
    config_before = (repo / ".git" / "config").read_bytes()
    probe = f"/tmp/ribbit-probe-{os.getpid()}"
    attempts = [
        # Tools: paths outside the root, through .., through a symlink, into .git/.
        xml_call("Write", file_path=str(home_target), content="x"),
        xml_call("Write", file_path="/etc/ribbit-escape", content="x"),
        xml_call("Write", file_path="../escape.txt", content="x"),
        xml_call("Write", file_path="out/escape.txt", content="x"),
        xml_call("Write", file_path=".git/config", content="[core]\n"),
        xml_call("Edit", file_path=".git/config", old_string="[core]", new_string="[evil]"),
        # Bash: the same, plus the network and the PID namespace.
        xml_call("Bash", command=f"echo x > {home_target}"),
        xml_call("Bash", command="echo x > /etc/ribbit-escape"),
        xml_call("Bash", command="echo x > ../escape.txt"),
        xml_call("Bash", command="echo x > out/escape.txt"),
        xml_call("Bash", command="echo '[evil]' >> .git/config"),
        xml_call("Bash", command=f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED"),
        xml_call("Bash", command=f"kill -0 {os.getpid()} && echo SEES_HOST_PROCESS"),
        xml_call("Bash", command=f"echo secret > {probe} && cat {probe}"),
    ]
    workspace, recorder = start(repo, write_replay(tmp_path / "r.jsonl", *attempts), watch=False)
    assert workspace.runner.sandboxed and workspace.runner.name == "bubblewrap"
    workspace.session.run("try to escape")
    outputs = tool_outputs(recorder)
    assert len(outputs) == len(attempts)
    for attempt, output in zip(attempts[:6], outputs[:6]):
        assert output.startswith("Error:"), (attempt, output)
    assert "outside the repository" in outputs[0] and "outside the repository" in outputs[3]
    assert ".git/" in outputs[4]
    for output in outputs[6:11]:
        assert "Exit code" in output and ("Read-only file system" in output or "Permission denied" in output), (outputs[6:11])
    assert "Exit code" in outputs[11] and "CONNECTED" not in outputs[11]
    assert "Exit code" in outputs[12] and "SEES_HOST_PROCESS" not in outputs[12]
    assert outputs[13].strip() == "secret"  # the sandbox's own /tmp works ...
    # ... and nothing reached the real system.
    assert not Path(probe).exists()
    assert not home_target.exists()
    assert not Path("/etc/ribbit-escape").exists()
    assert not (repo.parent / "escape.txt").exists()
    assert not (outside / "escape.txt").exists()
    assert (repo / ".git" / "config").read_bytes() == config_before
    assert not connected.is_set()
    # The transcript's tool messages carry the same errors to the model.
    tool_messages = [m.content for m in workspace.session.messages if m.role == "tool"]
    assert tool_messages[:6] == [o for o in outputs[:6]]


def test_sandbox_writes_in_the_repository_and_kills_the_process_group_on_timeout(repo: Path) -> None:
    runner = BwrapRunner(repo)
    cancel = threading.Event()
    ok = runner.run("echo inside > made.txt && cat made.txt", repo, 10, cancel)
    assert ok.exit_code == 0 and (repo / "made.txt").read_text() == "inside\n"
    marker = f"{61 + os.getpid() % 1000}.25"  # a sleep no one else runs
    slow = runner.run(f"sleep {marker} & sleep {marker}", repo, 1, cancel)
    assert slow.timed_out and slow.exit_code is None
    # The PID namespace died with its init: neither sleep is left anywhere.
    assert _gone(f"sleep {marker}")


def _gone(pattern: str) -> bool:
    for _ in range(300):  # the kernel tears the namespace down asynchronously
        if not subprocess.run(["pgrep", "-f", pattern], capture_output=True).stdout.strip():
            return True
        time.sleep(0.05)
    return False


def test_unsandboxed_runner_kills_background_children_on_timeout(repo: Path) -> None:
    runner = LocalRunner(repo)
    marker = f"{121 + os.getpid() % 1000}.5"
    result = runner.run(f"sleep {marker} & echo $! > bg.pid; sleep {marker}", repo, 1, threading.Event())
    assert result.timed_out
    assert (repo / "bg.pid").read_text().strip().isdigit()  # the background child did start
    assert _gone(f"sleep {marker}")


def test_output_is_capped_head_and_tail(repo: Path, tmp_path: Path) -> None:
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="seq 1 200000"))
    workspace, recorder = start(repo, replay, watch=False)
    workspace.session.run("flood")
    output = tool_outputs(recorder)[0]
    assert len(output) < 31_000 and output.startswith("1\n2\n") and output.rstrip().endswith("200000")
    assert "lines cut" in output


def test_without_a_sandbox_full_auto_refuses_and_ask_mode_asks_for_every_command(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("agent.session.workspace.sandbox_available", lambda: (False, "bubblewrap is not installed"))
    replay = write_replay(tmp_path / "r.jsonl", xml_call("Bash", command="ls"))
    with pytest.raises(SetupError, match="--no-sandbox"):
        start(repo, replay, mode="full-auto", watch=False)
    workspace, _ = start(repo, replay, mode="ask", watch=False)
    assert not workspace.runner.sandboxed and "NO SANDBOX" in workspace.sandbox_status
    assert workspace.session.approvals.policy.bash_needs_approval("ls")  # even the allow list asks
    workspace.session.run("list")
    approver = workspace.session.approvals.approver
    assert [r.kind for r in approver.requests] == ["bash"] and approver.requests[0].sandboxed is False  # type: ignore[attr-defined]
    forced, _ = start(repo, replay, mode="full-auto", watch=False, no_sandbox=True)
    assert "NO SANDBOX" in forced.sandbox_status and not forced.runner.sandboxed


DRIVER = """
import sys, threading
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from agent.sandbox.runner import BwrapRunner
print("start", flush=True)
BwrapRunner(Path(sys.argv[2])).run("sleep " + sys.argv[3], Path(sys.argv[2]), 600, threading.Event())
"""


def test_sandboxed_command_dies_with_ribbit(repo: Path) -> None:
    marker = f"{71 + os.getpid() % 1000}.75"
    root = Path(__file__).resolve().parents[2]
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(root), str(repo), marker], stdout=subprocess.PIPE, text=True,
    )
    assert driver.stdout is not None and driver.stdout.readline().strip() == "start"
    deadline = time.monotonic() + 180  # a busy machine (other test workers) starts ribbit slowly: a wait, not a timing
    while not subprocess.run(["pgrep", "-f", f"^sleep {marker}$"], capture_output=True).stdout.strip():
        # until the sandboxed sleep itself runs (bwrap's own argv names it earlier)
        assert time.monotonic() < deadline and driver.poll() is None, "the sandboxed command never started"
        time.sleep(0.05)
    driver.kill()  # kill -9: no atexit, no cleanup code runs in ribbit
    driver.wait()
    assert _gone(f"sleep {marker}")


def test_doctor_says_when_there_is_no_sandbox(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.session.diagnostics import agent_checks

    ok_checks = {c.name: c for c in agent_checks(repo)}
    assert ok_checks["sandbox"].ok and "bubblewrap" in ok_checks["sandbox"].detail
    assert "refs/ribbit" in ok_checks["undo journal"].detail
    monkeypatch.setattr("agent.sandbox.runner.shutil.which", lambda name: None)
    checks = {c.name: c for c in agent_checks(repo)}
    assert not checks["sandbox"].ok
    assert "NO SANDBOX" in checks["sandbox"].detail and "ask for approval" in checks["sandbox"].detail


def test_a_host_socket_that_goes_away_as_a_command_starts_does_not_fail_the_command(
    repo: Path, outside: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The socket table is read, then the socket's owner closes it and removes its file before bubblewrap
    # mounts the mask there (seen in CI: another test's socket): bubblewrap cannot make the mount point in
    # the read-only host. The command runs all the same, once, with a view without it.
    import agent.sandbox.runner as runner_module

    listed = iter([[outside / "gone.sock"]])
    monkeypatch.setattr(runner_module, "host_socket_paths", lambda: next(listed, []))
    result = BwrapRunner(repo).run("echo ran >> runs.txt; echo done", repo, 20, threading.Event())
    assert result.exit_code == 0 and "done" in result.output
    assert (repo / "runs.txt").read_text() == "ran\n"


def test_a_setup_error_that_is_not_a_vanished_path_is_reported_not_retried(
    repo: Path, outside: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import agent.sandbox.runner as runner_module

    calls: list[int] = []

    def sockets() -> list[Path]:
        calls.append(1)
        return [outside / "gone.sock"]  # never comes back: bubblewrap fails every time

    monkeypatch.setattr(runner_module, "host_socket_paths", sockets)
    monkeypatch.setattr(runner_module.os.path, "lexists", lambda path: True)  # as if the path were there
    result = BwrapRunner(repo).run("echo ran >> runs.txt", repo, 20, threading.Event())
    assert result.exit_code == 1 and result.output.startswith("bwrap: ") and len(calls) == 1
    assert not (repo / "runs.txt").exists()
