"""Running Bash commands: a plain local runner and two sandboxes, behind one small interface.

Linux (bubblewrap): the whole system read-only, the repository writable except `.git/`, a private
/tmp, no network, a new PID namespace, and it dies with ribbit (--die-with-parent).
macOS (sandbox-exec): the same file rules and no network through a Seatbelt profile; there is no
PID namespace there, so the process group is killed when ribbit exits.
Every runner: empty stdin, output capped head+tail, timeout and cancel kill the whole process group.
"""

from __future__ import annotations

import atexit
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

HEAD_BYTES = 256 * 1024
TAIL_BYTES = 256 * 1024


@dataclass(frozen=True)
class CommandResult:
    output: str
    exit_code: int | None
    timed_out: bool
    cancelled: bool
    cwd: Path | None  # the shell's working directory when it exited, if known
    dropped_lines: int = 0  # lines dropped from the middle while capturing very long output


class CommandRunner(Protocol):
    name: str
    sandboxed: bool

    def run(self, command: str, cwd: Path, timeout: float, cancel: threading.Event) -> CommandResult: ...


class _Capture:
    """Keeps the head and tail of a stream so a runaway command cannot exhaust memory."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.dropped_lines = 0

    def feed(self, chunk: bytes) -> None:
        room = HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_size += len(chunk)
        while self.tail_size - len(self.tail[0]) >= TAIL_BYTES:
            old = self.tail.popleft()
            self.tail_size -= len(old)
            self.dropped_lines += old.count(b"\n")

    def text(self) -> str:
        return (bytes(self.head) + b"".join(self.tail)).decode("utf-8", "replace")


class LocalRunner:
    """No isolation at all: used only when the user accepts that (approval per call, or --no-sandbox)."""

    name = "none"
    sandboxed = False

    def __init__(self, root: Path) -> None:
        self.root = root
        self._state = Path(tempfile.mkdtemp(prefix="ribbit-shell-"))

    def wrap(self, argv: list[str], cwd: Path) -> list[str]:
        return argv

    def close(self) -> None:
        """Remove the runner's scratch folder (the shell's cwd file)."""
        shutil.rmtree(self._state, ignore_errors=True)

    def run(self, command: str, cwd: Path, timeout: float, cancel: threading.Event) -> CommandResult:
        cwd_file = self._state / "cwd"
        cwd_file.unlink(missing_ok=True)
        script = (
            f"cd -- {shlex.quote(str(cwd))} 2>/dev/null || cd -- {shlex.quote(str(self.root))}\n"
            f"trap 'pwd > {shlex.quote(str(cwd_file))}' EXIT\n"
            f"{command}\n"
        )
        argv = self.wrap(["bash", "-c", script], cwd)
        env = dict(os.environ, PAGER="cat", GIT_PAGER="cat", TERM="dumb", NO_COLOR="1")
        proc = subprocess.Popen(
            argv, cwd=str(cwd if cwd.is_dir() else self.root), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, env=env,
        )
        _RUNNING.add(proc)
        capture = _Capture()
        assert proc.stdout is not None
        reader = threading.Thread(target=_pump, args=(proc.stdout, capture), daemon=True)
        reader.start()
        deadline = time.monotonic() + timeout
        timed_out = cancelled = False
        while proc.poll() is None:
            if cancel.is_set():
                cancelled = True
            elif time.monotonic() >= deadline:
                timed_out = True
            if timed_out or cancelled:
                _kill_group(proc)
                break
            try:
                proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
        proc.wait()
        _RUNNING.discard(proc)
        # Survivors that escaped the group could hold the pipe open; don't wait on them forever.
        reader.join(timeout=2)
        final_cwd = None
        try:
            final_cwd = Path(cwd_file.read_text().strip()) if cwd_file.exists() else None
        except OSError:
            final_cwd = None
        return CommandResult(
            output=capture.text(), exit_code=None if (timed_out or cancelled) else proc.returncode,
            timed_out=timed_out, cancelled=cancelled, cwd=final_cwd, dropped_lines=capture.dropped_lines,
        )


class BwrapRunner(LocalRunner):
    name = "bubblewrap"
    sandboxed = True

    def wrap(self, argv: list[str], cwd: Path) -> list[str]:
        root = str(self.root)
        state = str(self._state)
        args = [
            "bwrap",
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--perms", "1777", "--tmpfs", "/tmp",
        ]
        # A repository under /tmp sits on the private tmpfs: make the folders above it read-only,
        # so `../x` fails instead of quietly landing in a tmpfs that vanishes.
        made: set[str] = set()
        for target in (self.root, self._state):
            for parent in reversed(target.parents):
                if parent.is_relative_to("/tmp") and parent != Path("/tmp") and str(parent) not in made:
                    made.add(str(parent))
                    args += ["--perms", "0555", "--dir", str(parent)]
        args += ["--bind", root, root]
        git_dir = self.root / ".git"
        if git_dir.exists():
            args += ["--ro-bind", str(git_dir), str(git_dir)]
        args += [
            "--bind", state, state,
            "--unshare-all",  # network, PID, IPC, UTS, cgroup (and user, where allowed) namespaces
            "--die-with-parent",
            "--new-session",
            "--chdir", str(cwd if cwd.is_dir() else self.root),
            "--setenv", "TMPDIR", "/tmp",
        ]
        if os.geteuid() == 0:
            args += ["--cap-drop", "ALL"]  # as root bwrap would keep capabilities (and ignore file modes)
        args.append("--")
        return args + argv


SEATBELT_PROFILE = """(version 1)
(deny default)
(allow process-exec process-fork)
(allow signal (target same-sandbox))
(allow sysctl-read)
(allow mach-lookup)
(allow ipc-posix-shm ipc-posix-sem)
(allow file-read*)
(allow file-ioctl)
(allow file-write-data (literal "/dev/null") (literal "/dev/zero") (regex #"^/dev/tty") (regex #"^/dev/fd/"))
(allow file-write* (subpath (param "ROOT")) (subpath (param "TMP")) (subpath (param "STATE")))
(deny file-write* (subpath (param "GITDIR")) (literal (param "GITDIR")))
(deny network*)
"""


class SandboxExecRunner(LocalRunner):
    """macOS: Seatbelt via sandbox-exec. Written to the same rules as BwrapRunner; untested here."""

    name = "sandbox-exec"
    sandboxed = True

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self._tmp = Path(tempfile.mkdtemp(prefix="ribbit-tmp-"))  # the private TMPDIR

    def close(self) -> None:
        super().close()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def wrap(self, argv: list[str], cwd: Path) -> list[str]:
        real = lambda p: str(Path(p).resolve())  # noqa: E731 (Seatbelt matches resolved paths: /private/var/...)
        return [
            "sandbox-exec", "-p", SEATBELT_PROFILE,
            "-D", f"ROOT={real(self.root)}", "-D", f"TMP={real(self._tmp)}", "-D", f"STATE={real(self._state)}",
            "-D", f"GITDIR={real(self.root / '.git')}",
            "/usr/bin/env", f"TMPDIR={self._tmp}", *argv,
        ]


def sandbox_available() -> tuple[bool, str]:
    """Whether this machine has a working sandbox for Bash, and which (or why not)."""
    if sys.platform == "darwin":
        return sandbox_exec_works()
    if sys.platform.startswith("linux"):
        return bwrap_works()
    return False, f"no sandbox for Bash on {sys.platform}"


def sandbox_exec_works() -> tuple[bool, str]:
    exe = shutil.which("sandbox-exec")
    if not exe:
        return False, "sandbox-exec is not available"
    try:
        probe = subprocess.run([exe, "-p", "(version 1)(allow default)", "/usr/bin/true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"sandbox-exec failed to start: {exc}"
    if probe.returncode != 0:
        return False, "sandbox-exec refused to run: " + probe.stderr.decode(errors="replace").strip()[:200]
    return True, "sandbox-exec"


def bwrap_works() -> tuple[bool, str]:
    """Whether bubblewrap can actually create its namespaces here (containers sometimes forbid it)."""
    exe = shutil.which("bwrap")
    if not exe:
        return False, "bubblewrap (bwrap) is not installed; install the Debian package 'bubblewrap'"
    try:
        probe = subprocess.run(
            [exe, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "--", "true"],
            capture_output=True, timeout=10,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"bubblewrap failed to start: {exc}"
    if probe.returncode != 0:
        reason = probe.stderr.decode(errors="replace").strip().splitlines()
        return False, "bubblewrap cannot create namespaces here: " + (reason[-1] if reason else "unknown")
    return True, "bubblewrap"


def make_runner(root: Path, want_sandbox: bool = True) -> CommandRunner:
    if want_sandbox and sandbox_available()[0]:
        return SandboxExecRunner(root) if sys.platform == "darwin" else BwrapRunner(root)
    return LocalRunner(root)


# Commands still running when ribbit exits are killed with their process group (a sandboxed one
# also dies through --die-with-parent; this covers the unsandboxed runner and macOS).
_RUNNING: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_running() -> None:
    for proc in list(_RUNNING):
        _kill_group(proc)


def _pump(stream, capture: _Capture) -> None:  # type: ignore[no-untyped-def]
    while chunk := stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536):
        capture.feed(chunk)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
