"""Sessions for the sandbox attack suite: scripted approvals, folders outside /tmp, a hang guard."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agent.core.approvals import ApprovalDecision, ApprovalRequest, BashApprovalRequest
from agent.session.workspace import Workspace, open_workspace
from tests.safety.helpers import HookedReplay, Recorder, tool_outputs, write_replay

# The sandbox has a private /tmp, so anything a test wants it to *find* on the host lives here.
HOST_SCRATCH = Path("/var/tmp")


class ScriptedApprover:
    """Answers from a list (then no), and keeps every request."""

    def __init__(self, *answers: bool | ApprovalDecision) -> None:
        self.answers = list(answers)
        self.requests: list[ApprovalRequest] = []

    def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        self.requests.append(request)
        answer = self.answers.pop(0) if self.answers else False
        return answer if isinstance(answer, ApprovalDecision) else ApprovalDecision(approved=answer)

    def bash_requests(self) -> list[BashApprovalRequest]:
        return [r for r in self.requests if isinstance(r, BashApprovalRequest)]


def session(
    root: Path, tmp_path: Path, *turns: str, mode: str = "full-auto", approver: ScriptedApprover | None = None,
    no_sandbox: bool = False,
) -> tuple[Workspace, Recorder, ScriptedApprover]:
    """Run a whole replayed session (one task) and return what happened. Fails if it hangs."""
    approver = approver or ScriptedApprover()
    recorder = Recorder()
    workspace = open_workspace(
        HookedReplay(write_replay(tmp_path / "replay.jsonl", *turns)), root, mode=mode,  # type: ignore[arg-type]
        approver=approver, sink=recorder, watch=False, no_sandbox=no_sandbox,
    )
    try:
        finished = run_with_hang_guard(lambda: workspace.session.run("go"))
        assert finished, "the session hung"
    finally:
        workspace.close()
    return workspace, recorder, approver


def run_with_hang_guard(work, limit_s: float = 180) -> bool:  # type: ignore[no-untyped-def]
    """Run `work` in a thread; False if it is still running after `limit_s` (a hang, not a timing check)."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            work()
        except BaseException as exc:  # re-raised below
            failure.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit_s)
    if failure:
        raise failure[0]
    return not thread.is_alive()


def everything_the_model_got(workspace: Workspace, recorder: Recorder) -> str:
    """Every tool result and every message of the conversation, as one text."""
    messages = [m.content or "" for m in workspace.session.messages]
    return "\n".join([*tool_outputs(recorder), *messages])


@contextmanager
def host_folder(prefix: str) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=HOST_SCRATCH))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class UnixListener:
    """A listening unix socket (a path, or abstract when the name starts with NUL) that records connections."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(address)
        self.sock.listen()
        self.sock.settimeout(0.1)
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()
        if not self.address.startswith("\0"):
            try:
                os.unlink(self.address)
            except OSError:
                pass
