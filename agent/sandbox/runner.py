"""Running Bash commands: a plain local runner and two sandboxes, behind one small interface.

Linux (bubblewrap): the whole system read-only, the repository writable except `.git` (or read-only
too: `access="read-only"`), credential folders and host sockets hidden, a private size-capped /tmp and
/dev/shm, no network, a new PID namespace, a minimal environment, and it dies with ribbit (the mount
layout: agent/sandbox/bwrap.py).
macOS (sandbox-exec): the same file rules and no network through a Seatbelt profile; there is no
PID namespace there, so the process group is killed when ribbit exits.
Every runner: empty stdin, output capped head+tail, timeout and cancel kill the whole process group,
and nothing is read back from a file the command could touch: the final working directory comes back
through an inherited pipe, bounded.
"""

from __future__ import annotations

import atexit
import errno
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from agent.sandbox.caps import CapLimits, CommandCaps, cgroups_wanted
from agent.sandbox.credentials import CredentialMasks, Masked
from agent.sandbox.seccomp import filter_fd
from agent.sandbox.bwrap import SandboxView, bwrap_can_cap_tmpfs, bwrap_works, command_line, disk_tmp_base, under_private_tree, visible
from agent.sandbox.config import (
    Access, SandboxSettings, exposed_aliases, exposed_inside, expand, hidden_paths, host_socket_paths, sandbox_env,
)
from agent.fs import CREATE_FLAGS, READ_FLAGS
from agent.sandbox.overlay import ApplyObserver, OverlayRun, sweep_stale, usable_for
from agent.paths import home_dir

if TYPE_CHECKING:
    from agent.sandbox.output_spool import Spool

HEAD_BYTES = 256 * 1024
TAIL_BYTES = 256 * 1024
# The working directory comes back through a pipe the command can also write to: read at most this.
CWD_PIPE_LIMIT = 1 << 20
# An empty `.git` folder ribbit makes as a mount point while a command runs, told apart by its mode.
GIT_MOUNT_POINT_MODE = 0o500
# A read-only run (say, an allowed `python3 -m pytest`): pytest keeps its cache in the command's private /tmp
# (emptied after it) instead of warning, eight lines a run, that it cannot write .pytest_cache into the model's
# context; Python writes no bytecode it could not keep anyway.
READ_ONLY_SETUP = ('export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }-o cache_dir=/tmp/.pytest_cache"\n'
                   "export PYTHONDONTWRITEBYTECODE=1\n")
# strerror(EROFS), however the program words the rest; LC_MESSAGES=C keeps it English.
_READ_ONLY_MESSAGE = re.compile(r"read-only file system", re.IGNORECASE)


@dataclass(frozen=True)
class CommandResult:
    output: str
    exit_code: int | None
    timed_out: bool
    cancelled: bool
    cwd: Path | None  # the shell's working directory when it exited, if known
    dropped_lines: int = 0  # lines dropped from the middle while capturing very long output
    access: Access = "read-write"
    stopped: str | None = None  # why ribbit killed the command (a cap it reached), one line
    capped: str | None = None  # a memory or process cap the command ran into (the kernel held it), one line


MOUNT_RETRIES = 3
_BWRAP_MOUNT_FAILURES = tuple(f"bwrap: Can't {what} " for what in (
    "create file at", "mkdir parents for", "mkdir", "find source path", "get type of source"))


def lost_a_mount_point(result: CommandResult) -> bool:
    """Did bubblewrap fail to set up because a path it was to mount over is gone?

    Its own message, and no shell ran: the command's EXIT trap never reported a folder. The path named is
    checked: it must be missing now (a socket closed, a folder removed meanwhile), so a real setup error is
    reported, not retried.
    """
    if result.cwd is not None or result.exit_code != 1:
        return False
    first = result.output.split("\n", 1)[0]
    for prefix in _BWRAP_MOUNT_FAILURES:
        if first.startswith(prefix):
            named = first[len(prefix):].split(": ", 1)[0]
            return named.startswith("/") and not os.path.lexists(named)
    return False


def tried_to_write(result: CommandResult) -> bool:
    """A read-only run that failed on a write (EROFS): the user may want it run with write access."""
    return (
        result.access == "read-only" and result.exit_code not in (0, None)
        and _READ_ONLY_MESSAGE.search(result.output) is not None
    )


class SandboxError(Exception):
    """A command cannot run the way it was asked to (e.g. read-only without a sandbox)."""


class CommandRunner(Protocol):
    name: str
    sandboxed: bool

    def run(
        self, command: str, cwd: Path, timeout: float, cancel: threading.Event, access: Access = "read-write",
        spool: Spool | None = None,
    ) -> CommandResult: ...

    def close(self) -> None:
        """Drop what the runner keeps between commands (a scratch folder); safe to call more than once."""
        ...


class _Capture:
    """Keeps the head and tail of a stream so a runaway command cannot exhaust memory; the whole
    stream also goes to `spool` (a file Read can page through, agent.sandbox.output_spool) when given."""

    def __init__(self, spool: Spool | None = None) -> None:
        self.spool = spool
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.dropped_lines = 0

    def feed(self, chunk: bytes) -> None:
        if self.spool is not None:
            self.spool.feed(chunk)
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


# A session may take this share of the free space on the repository's file system (sandbox.toml:
# write_quota_mb): a command that writes past it is killed, before the user's disk is full.
QUOTA_SHARE_OF_FREE = 0.5
QUOTA_CHECK_S = 0.05  # how often a running command's disk use is looked at (a statvfs call)


class WriteQuota:
    """What one session may write to the repository's file system: the free space its writable commands
    took while they ran (what the user and other programs write between commands is not counted; a
    command that deletes gives room back), and what the undo journal copied of it (`charge`). Each command also gets what is left as its largest file
    (`ulimit -f`), so one huge write fails at once instead of at the next check."""

    def __init__(self, root: Path, limit_mb: int | None) -> None:
        self.root = root
        self.free_at_start = _free_bytes(root)
        if limit_mb is None:
            self.limit = int(self.free_at_start * QUOTA_SHARE_OF_FREE) if self.free_at_start is not None else None
        else:
            self.limit = limit_mb << 20 if limit_mb > 0 else None  # 0: no quota
        self.used = 0  # by the commands that have ended
        self._free_before: int | None = None  # when the running command started

    def command_started(self) -> None:
        self._free_before = _free_bytes(self.root) if self.limit is not None else None

    def command_ended(self) -> None:
        self.used = self._in_use()
        self._free_before = None

    def _in_use(self) -> int:
        if self._free_before is None:
            return self.used
        free = _free_bytes(self.root)
        return self.used if free is None else max(0, self.used + self._free_before - free)

    def charge(self, size: int) -> None:
        """Count bytes written between commands against the quota: the undo journal's copies of what the
        commands wrote (handed over by the session), which no command's free-space reading sees."""
        self.used += max(0, size)

    def left(self) -> int | None:
        """Bytes the session may still write (None: no quota, or the disk cannot be measured)."""
        if self.limit is None or self.free_at_start is None:
            return None
        return self.limit - self._in_use()

    def reached(self) -> str | None:
        left = self.left()
        if left is None or left > 0:
            return None
        assert self.limit is not None
        return f"killed: the session's write quota for the repository's disk ({self.limit >> 20:,} MiB) was reached"

    def describe(self) -> str:
        if self.limit is None:
            return "none" if self.free_at_start is not None else "none (cannot measure the disk)"
        return f"{self.limit >> 20:,} MiB of the repository's disk a session"


def _free_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class LocalRunner:
    """No isolation at all: used only when the user accepts that (approval per call, or --no-sandbox).

    It still gets the minimal environment: nothing the model runs should print ribbit's secrets.
    """

    name = "none"
    sandboxed = False

    def __init__(self, root: Path, settings: SandboxSettings | None = None, *, model_bytes: int = 0) -> None:
        """`model_bytes`: what the loaded model keeps resident (the default memory cap leaves it its room)."""
        self.root = root.resolve()
        self.settings = settings or SandboxSettings()
        self.writable_runs = 0  # commands that could change the repository (the journal snapshots after them)
        # Told of each file ribbit writes for a command whose writes were kept apart (agent.sandbox.overlay).
        self.write_observer: ApplyObserver | None = None
        self.quota = WriteQuota(self.root, self.settings.write_quota_mb)
        # A submodule's `.git` is a work-tree path: guarded as its state was when the session started.
        self.submodules = read_submodules(self.root)
        self.caps = CommandCaps.create(
            CapLimits.from_settings(self.settings.memory_mb, self.settings.max_processes, model_bytes),
            cgroups=cgroups_wanted(),
        )

    def close(self) -> None:
        """Remove the session's cgroup (killing what is left in it); safe to call more than once."""
        self.caps.close()

    def environment(self) -> dict[str, str]:
        return sandbox_env(os.environ, self.settings, tmpdir=None)

    @contextmanager
    def prepared(self, access: Access) -> Iterator[list[int]]:
        """Per-command setup and teardown around the process (the sandbox's `.git` mount point); yields
        descriptors the process inherits (closed here afterwards)."""
        yield []

    def wrap(self, argv: list[str], cwd: Path, access: Access, fds: list[int] | None = None) -> list[str]:
        return argv

    def isolates_writes(self, access: Access) -> bool:
        """Whether a command run so writes only where ribbit applies it afterwards (agent.sandbox.overlay):
        then nothing else changing the checkout meanwhile is taken for the command's doing."""
        return False

    def after_command(self) -> list[str]:
        """Lines for the command's output about what ribbit did with its writes afterwards."""
        return []

    def launch_dir(self, cwd: Path) -> Path:
        return cwd if cwd.is_dir() else self.root

    def run(
        self, command: str, cwd: Path, timeout: float, cancel: threading.Event, access: Access = "read-write",
        spool: Spool | None = None,
    ) -> CommandResult:
        if access == "read-only" and not self.sandboxed:
            raise SandboxError("cannot run a command read-only without a sandbox")
        left = self.quota.left()
        if left is not None and left <= 0 and access == "read-write":
            return CommandResult(
                output="", exit_code=None, timed_out=False, cancelled=False, cwd=None, access=access,
                stopped=self.quota.reached(),
            )
        if access == "read-write":
            self.writable_runs += 1
        result = self._run_once(command, cwd, timeout, cancel, access, spool, left)
        if result is None:  # the shell could not join its cgroup, before anything of the command ran
            self.caps.fall_back()
            result = self._run_once(command, cwd, timeout, cancel, access, spool, left)
            assert result is not None
        for _ in range(MOUNT_RETRIES):
            if not lost_a_mount_point(result):
                break
            # A host socket (or a folder to hide) went away between the sandbox's view and bubblewrap's mounts:
            # nothing of the command ran; a fresh view no longer has it.
            if spool is not None:
                spool.discard()
            result = self._run_once(command, cwd, timeout, cancel, access, spool, left) or result
        return result

    def _run_once(
        self, command: str, cwd: Path, timeout: float, cancel: threading.Event, access: Access,
        spool: Spool | None, left: int | None,
    ) -> CommandResult | None:
        # The largest file a command may write: what is left of the quota (in ulimit's 1 KiB blocks).
        fsize = f"ulimit -f {max(left // 1024, 1)} 2>/dev/null\n" if left is not None else ""
        fsize += READ_ONLY_SETUP if access == "read-only" else ""
        cwd_read, cwd_write = os.pipe()
        joining = self.caps.join()
        try:
            script = (
                # Into the session's cgroup first (agent.sandbox.caps): nothing runs before it is capped.
                joining.lines +
                # The OOM killer takes a runaway command before ribbit and its model.
                "{ echo 1000 > /proc/self/oom_score_adj; } 2>/dev/null\n" + fsize +
                f"cd -- {shlex.quote(str(cwd))} 2>/dev/null || cd -- {shlex.quote(str(self.root))}\n"
                f"trap 'printf \"%s\\0\" \"$PWD\" >&{cwd_write}' EXIT\n"
                f"{command}\n"
            )
            with self.prepared(access) as fds:
                argv = self.wrap(["bash", "-c", script], cwd, access, fds)
                self.quota.command_started()
                try:
                    capture, exit_code, timed_out, cancelled, stopped = self._execute(
                        argv, cwd, timeout, cancel, (cwd_write, *joining.fds, *fds), spool, joining.started,
                    )
                finally:
                    self.quota.command_ended()
            if joining.failed():
                if spool is not None:
                    spool.discard()
                return None
            if access == "read-write":
                for line in put_back_submodule_gits(self.submodules, self.root):
                    capture.feed(("\n" + line).encode())
            for line in self.after_command():
                capture.feed(("\n" + line).encode())
            os.close(cwd_write)
            cwd_write = -1
            final_cwd = _read_cwd(cwd_read)
        finally:
            joining.close()
            for fd in (cwd_read, cwd_write):
                if fd >= 0:
                    os.close(fd)
        output = capture.text()
        return CommandResult(
            output=output, exit_code=exit_code, timed_out=timed_out, cancelled=cancelled,
            cwd=final_cwd, dropped_lines=capture.dropped_lines, access=access, stopped=stopped,
            capped=None if (timed_out or cancelled) else self.caps.verdict(output, exit_code),
        )

    def _execute(
        self, argv: list[str], cwd: Path, timeout: float, cancel: threading.Event, pass_fds: tuple[int, ...],
        spool: Spool | None = None, started: Callable[[], None] | None = None,
    ) -> tuple[_Capture, int | None, bool, bool, str | None]:
        try:
            proc = subprocess.Popen(
                argv, cwd=str(self.launch_dir(cwd)), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True, env=self.environment(), pass_fds=pass_fds,
            )
        finally:
            if started is not None:
                started()  # the process holds its own copies of the descriptors it needs
        _RUNNING.add(proc)
        capture = _Capture(spool)
        assert proc.stdout is not None
        reader = threading.Thread(target=_pump, args=(proc.stdout, capture), daemon=True)
        reader.start()
        deadline = time.monotonic() + timeout
        timed_out = cancelled = False
        stopped: str | None = None
        next_check = time.monotonic() + QUOTA_CHECK_S
        while proc.poll() is None:
            if cancel.is_set():
                cancelled = True
            elif time.monotonic() >= deadline:
                timed_out = True
            elif time.monotonic() >= next_check:
                next_check = time.monotonic() + QUOTA_CHECK_S
                stopped = self.quota.reached() or self.caps.too_many(proc.pid)
            if timed_out or cancelled or stopped:
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
        exit_code = None if (timed_out or cancelled or stopped) else proc.returncode
        return capture, exit_code, timed_out, cancelled, stopped


def _read_cwd(fd: int) -> Path | None:
    """The last NUL-terminated path the EXIT trap wrote; never blocks, reads at most CWD_PIPE_LIMIT."""
    os.set_blocking(fd, False)
    data = b""
    total = 0
    while total < CWD_PIPE_LIMIT:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break  # a survivor still holds the write end: take what is there
        if not chunk:
            break
        total += len(chunk)
        data = (data + chunk)[-8192:]
    records = data.split(b"\0")[:-1]  # the part after the last NUL is incomplete
    if not records or not records[-1]:
        return None
    text = records[-1].decode("utf-8", "surrogateescape")
    if not text.startswith("/") or len(text) > 4096:
        return None
    return Path(text)


class BwrapRunner(LocalRunner):
    name = "bubblewrap"
    sandboxed = True

    def __init__(self, root: Path, settings: SandboxSettings | None = None, *, model_bytes: int = 0) -> None:
        super().__init__(root, settings, model_bytes=model_bytes)
        _remove_git_mount_point(self.root / ".git")  # left by a ribbit killed while a command ran
        # Without --size a tmpfs could take half the RAM: /tmp and /dev/shm are then a folder on disk
        # (emptied after every command; ribbit never reads from it).
        self._disk_tmp = None if bwrap_can_cap_tmpfs() else Path(tempfile.mkdtemp(prefix="ribbit-sandbox-tmp-", dir=disk_tmp_base()))
        self.git_masks = CredentialMasks(self.root)
        # Writable commands write through an overlay ribbit applies afterwards, where this system allows it.
        self.overlay_base = usable_for(self.root)
        if self.overlay_base is not None:
            sweep_stale(self.overlay_base)
        self._overlay: OverlayRun | None = None
        self._overlay_lines: list[str] = []

    def isolates_writes(self, access: Access) -> bool:
        return access == "read-write" and self.overlay_base is not None

    def after_command(self) -> list[str]:
        lines, self._overlay_lines = self._overlay_lines, []
        return lines

    @contextmanager
    def _overlay_for(self, access: Access) -> Iterator[None]:
        """The command's overlay while it runs; its upper layer applied to the checkout when it has ended."""
        if not self.isolates_writes(access):
            yield
            return
        assert self.overlay_base is not None
        self._overlay = OverlayRun(self.root, self.overlay_base)
        try:
            yield
        finally:
            overlay, self._overlay = self._overlay, None
            try:
                self._overlay_lines = overlay.apply(self.write_observer).lines()
            finally:
                overlay.close()

    def close(self) -> None:
        super().close()
        if self._disk_tmp is not None:
            shutil.rmtree(self._disk_tmp, ignore_errors=True)
        self.git_masks.close()

    def environment(self) -> dict[str, str]:
        return sandbox_env(os.environ, self.settings, tmpdir="/tmp")

    def launch_dir(self, cwd: Path) -> Path:
        return Path("/")  # bwrap's --chdir places the command; the host process never enters the repo

    @contextmanager
    def prepared(self, access: Access) -> Iterator[list[int]]:
        """In a writable repository with no `.git`, an empty read-only `.git` is mounted while the command
        runs, so it cannot create a repository that ribbit or the user's next `git` would trust; the same
        for a submodule folder with no `.git` (not initialised). bwrap needs a mount point: ribbit makes
        an empty folder and removes it right after. Yields the seccomp filter's descriptor (see wrap)."""
        made: list[tuple[Path, os.stat_result]] = []
        if access == "read-write":
            folders = [self.root, *(s.folder for s in self.submodules if _real_folder(s.folder, self.root))]
            for folder in folders:
                dot_git = folder / ".git"
                if os.path.lexists(dot_git):
                    continue
                try:
                    os.mkdir(dot_git, GIT_MOUNT_POINT_MODE)
                    made.append((dot_git, os.lstat(dot_git)))
                except OSError:
                    pass  # the command cannot make it either (same user, fewer rights)
        if self._disk_tmp is not None:
            for sub in ("tmp", "shm"):
                (self._disk_tmp / sub).mkdir(mode=0o700, exist_ok=True)
        seccomp = filter_fd()
        try:
            with self._overlay_for(access):
                yield [seccomp]
        finally:
            os.close(seccomp)
            for dot_git, info in made:
                _remove_git_mount_point(dot_git, info)
            if self._disk_tmp is not None:
                for sub in ("tmp", "shm"):
                    shutil.rmtree(self._disk_tmp / sub, ignore_errors=True)  # never follows a link

    def view(self, access: Access = "read-write", cwd: Path | None = None) -> SandboxView:
        environ = os.environ
        writable = [self.root]
        if access == "read-write":
            home = home_dir(environ)
            extra = (expand(w, home).resolve() for w in self.settings.writable)
            writable += [p for p in extra if p.exists() and not p.is_relative_to(self.root)]
        # Host paths the sandbox shows under its private /tmp, /dev, /proc: only what is bound there.
        bound = [self.root, *writable]

        def shown(path: Path) -> bool:
            return not under_private_tree(path) or any(path.is_relative_to(b) for b in bound)

        # A hidden folder that is the repository (the home folder as one) is not hidden: the repository is bound there.
        hidden = [p for p in hidden_paths(self.settings, environ, extra=_ribbit_private_folders(), bound=bound)
                  if shown(p) and p not in bound]
        exposed = exposed_inside(self.settings, environ, hidden)
        aliases = exposed_aliases(self.settings, environ, exposed)
        binds = [*bound, *exposed, *(named for named, _ in aliases)]
        # A mask under another one is needed only where a bind in between shows the path again.
        hidden = [p for p in hidden if visible(p, hidden, binds, below=True)]
        # A shown folder reached through a link is bound at its name too: what is hidden inside it, there as well.
        hidden += [named / h.relative_to(real) for named, real in aliases for h in hidden if h != real and h.is_relative_to(real)]
        sockets = [s for s in host_socket_paths() if shown(s) and visible(s, hidden, binds)]
        masks = self.git_masks.mounts()
        masked = [m for m in masks if shown(m.path) and visible(m.path, hidden, binds)]
        # A shown home path that is a link (`~/.gitconfig` -> a dotfiles folder) is bound at its name too:
        # the masked copy of what it leads to goes there as well, over that bind.
        masked += [Masked(named / m.path.relative_to(real), m.source) for named, real in aliases for m in masks
                   if m.path == real or m.path.is_relative_to(real)]
        git_protected = git_paths_to_protect(self.root)
        pinned: list[Path] = []
        if access == "read-only":
            writable = []
        else:
            pinned, submodule_gits = submodule_mounts(self.submodules, self.root)
            git_protected += submodule_gits
        return SandboxView(
            root=self.root, access=access, writable=writable, hidden=hidden, exposed=exposed, sockets=sockets,
            git_protected=git_protected, pinned=pinned,
            tmp_bytes=None if self._disk_tmp else self.settings.tmp_bytes,
            shm_bytes=None if self._disk_tmp else self.settings.shm_bytes, masked=masked, aliases=aliases,
        )

    def wrap(self, argv: list[str], cwd: Path, access: Access, fds: list[int] | None = None) -> list[str]:
        """bwrap's command line; `fds`: what `prepared` yielded (the seccomp filter, agent.sandbox.seccomp)."""
        line = command_line(self.view(access), argv, cwd, disk_tmp=self._disk_tmp, seccomp_fd=fds[0] if fds else None)
        overlay = self._overlay
        if overlay is None:
            return line
        at = len(line) - len(argv) - 1  # bubblewrap's `--` before the command
        assert line[at] == "--"
        return overlay.prefix() + line[:at] + overlay.bwrap_options() + line[at:]


def git_paths_to_protect(root: Path) -> list[Path]:
    """`.git` itself, and where a `.git` file points inside the repository (its gitdir and commondir).

    Outside the repository everything is read-only already. A `.git` that is a symlink cannot carry a
    mount: its target is protected, the link itself is not (ribbit's own git trusts only the start state).
    """
    dot_git = root / ".git"
    try:
        info = os.lstat(dot_git)
    except OSError:
        return []
    out: list[Path] = []
    if stat.S_ISLNK(info.st_mode):
        target = dot_git.resolve()
        if target.exists() and target.is_relative_to(root):
            out.append(target)
        return out
    out.append(dot_git)
    if stat.S_ISREG(info.st_mode) and info.st_size <= 4096:
        gitdir = _gitfile_target(dot_git, root)
        if gitdir is not None:
            common = _gitfile_target(gitdir / "commondir", gitdir, prefix="")
            for path in (gitdir, common):
                if path is not None and path.exists() and path.is_relative_to(root) and path != root:
                    out.append(path)
    return out


def _gitfile_target(path: Path, base: Path, prefix: str = "gitdir:") -> Path | None:
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        text = path.read_text(errors="replace")[:4096].strip()
    except OSError:
        return None
    if not text.startswith(prefix):
        return None
    target = Path(text[len(prefix):].strip())
    return (target if target.is_absolute() else base / target).resolve()


def _remove_git_mount_point(path: Path, made: os.stat_result | None = None) -> None:
    """Remove the empty `.git` ribbit made (the same folder, or one with ribbit's marker mode), nothing else."""
    try:
        now = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISDIR(now.st_mode):
        return
    ours = (now.st_dev, now.st_ino) == (made.st_dev, made.st_ino) if made else stat.S_IMODE(now.st_mode) == GIT_MOUNT_POINT_MODE
    if ours:
        try:
            os.rmdir(path)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.EBUSY):
                raise


# -- submodules ---------------------------------------------------------------------------------------
# A submodule's `.git` (a gitfile, or nothing where it is not initialised) is an ordinary work-tree path,
# yet the user's next `git status` in the repository enters the submodule and runs whatever config that
# `.git` leads to (core.fsmonitor...). So, in every command that can write: each submodule folder and its
# parents inside the root are mount points (rename and rmdir fail: EBUSY), its `.git` is read-only (or an
# empty read-only mount point where there is none). What a mount cannot cover (a folder missing or behind
# a link, a `.git` that is a link, no bubblewrap) is checked after the command and put back.

MAX_SUBMODULES = 1000
MAX_SUBMODULE_DEPTH = 8
GITFILE_LIMIT = 4096
GITLINK_MODE = "160000"


@dataclass(frozen=True)
class Submodule:
    """A gitlink of the user's index (or of a submodule's own), and its `.git` as the session found it."""

    folder: Path
    start: tuple[str, object] | None  # _dot_git_state at session start; None: there was no `.git`


def read_submodules(root: Path) -> list[Submodule]:
    """The gitlinks (mode 160000) inside `root`, nested ones included, read once through gitcmd.
    Only the index is read: nothing a submodule's config names runs."""
    from agent.git import GitError, GitRepo, find_repository, session_repo

    try:
        repo = session_repo(root) or find_repository(root)
    except GitError:
        return []
    folders: list[Path] = []
    queue: list[tuple[GitRepo, int]] = [(repo, 0)] if repo is not None else []
    while queue and len(folders) < MAX_SUBMODULES:
        current, depth = queue.pop()
        try:
            listing = os.fsdecode(current.out("ls-files", "-s", "-z", env={"GIT_LITERAL_PATHSPECS": "1"}))
        except GitError:
            continue
        for entry in listing.split("\0"):
            meta, _, rel = entry.partition("\t")
            if meta.split(" ")[0] != GITLINK_MODE or not rel or ".." in rel.split("/"):
                continue
            folder = current.work_tree / rel
            if not folder.is_relative_to(root) or folder == root or folder in folders:
                continue  # outside the root everything is read-only already
            folders.append(folder)
            gitdir = _submodule_git_dir(folder)
            if gitdir is not None and depth + 1 < MAX_SUBMODULE_DEPTH:
                # `ls-files -s` reads the index only (no filter, hook or fsmonitor runs; those are
                # overridden anyway): the parent's overrides spare a `config --list` per submodule.
                queue.append((GitRepo(git_dir=gitdir, work_tree=folder, _overrides=current.overrides()), depth + 1))
    out = []
    for folder in folders[:MAX_SUBMODULES]:
        _remove_git_mount_point(folder / ".git")  # left by a ribbit killed while a command ran
        out.append(Submodule(folder=folder, start=_dot_git_state(folder / ".git")))
    return out


def _submodule_git_dir(folder: Path) -> Path | None:
    dot_git = folder / ".git"
    try:
        info = os.lstat(dot_git)
    except OSError:
        return None
    target = dot_git if stat.S_ISDIR(info.st_mode) else _gitfile_target(dot_git, folder)
    return target if target is not None and target.is_dir() else None


def _dot_git_state(dot_git: Path) -> tuple[str, object] | None:
    """What a `.git` is, enough to see it replaced: a folder's identity, a gitfile's bytes, a link's target."""
    try:
        info = os.lstat(dot_git)
        if stat.S_ISLNK(info.st_mode):
            return ("link", os.readlink(dot_git))
        if stat.S_ISREG(info.st_mode) and info.st_size <= GITFILE_LIMIT:
            fd = os.open(dot_git, READ_FLAGS)
            try:
                return ("file", os.read(fd, GITFILE_LIMIT + 1))
            finally:
                os.close(fd)
        return (stat.filemode(info.st_mode)[0], (info.st_dev, info.st_ino))
    except FileNotFoundError:
        return None
    except OSError as exc:
        return ("unreadable", exc.errno)


def _real_folder(path: Path, root: Path) -> bool:
    """`path` and every folder between it and `root` are folders, not links (a mount must not follow one)."""
    here = path
    while here != root:
        try:
            if not stat.S_ISDIR(os.lstat(here).st_mode):
                return False
        except OSError:
            return False
        here = here.parent
    return True


def submodule_mounts(submodules: list[Submodule], root: Path) -> tuple[list[Path], list[Path]]:
    """(folders to pin as mount points, `.git` paths to mount read-only) for one writable command."""
    pinned: dict[Path, None] = {}
    gits: list[Path] = []
    for sub in submodules:
        if not _real_folder(sub.folder, root):
            continue  # missing or behind a link: checked after the command instead
        here = sub.folder
        while here != root:
            pinned[here] = None
            here = here.parent
        dot_git = sub.folder / ".git"
        try:
            if not stat.S_ISLNK(os.lstat(dot_git).st_mode):
                gits.append(dot_git)
        except OSError:
            pass  # no mount point could be made: checked after the command
    return list(pinned), gits


def put_back_submodule_gits(submodules: list[Submodule], root: Path) -> list[str]:
    """After a writable command: remove any submodule `.git` that is not the one the session started
    with (never following a link) and restore a gitfile's bytes. One `Error:` line for the model each."""
    from agent.fs import remove_tree

    lines = []
    for sub in submodules:
        dot_git = sub.folder / ".git"
        if _dot_git_state(dot_git) == sub.start:
            continue
        rel = dot_git.relative_to(root).as_posix()
        try:
            if not _real_folder(sub.folder, root):
                raise OSError(errno.ENOTDIR, "the submodule folder is not a folder now")
            if sub.start is None or sub.start[0] == "file":
                remove_tree(dot_git)
            if sub.start is not None and sub.start[0] == "file":
                fd = os.open(dot_git, CREATE_FLAGS, 0o644)
                try:
                    os.write(fd, sub.start[1])  # type: ignore[arg-type]
                finally:
                    os.close(fd)
            elif sub.start is not None:
                raise OSError(errno.EEXIST, "a folder or link cannot be put back")
        except OSError as exc:
            lines.append(f"Error: {rel} (a submodule's git link) was changed and ribbit could not put it back "
                         f"({exc.strerror}): do not run git in this repository until the user checks it.")
            continue
        done = "removed it" if sub.start is None else "put it back as it was"
        lines.append(f"Error: {rel} belongs to a submodule and may not be changed (git would run its config "
                     f"at the user's next `git status`): ribbit {done}.")
    return lines


def _ribbit_private_folders() -> list[Path]:
    """ribbit's own state (other projects' undo journals, allow lists): no command needs it."""
    from agent.paths import state_home

    return [state_home()]


def _seatbelt_string(path: Path) -> str:
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'


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
(allow file-write* (subpath (param "TMP")))
"""


class SandboxExecRunner(LocalRunner):
    """macOS: Seatbelt via sandbox-exec. Written to the same rules as BwrapRunner; untested here."""

    name = "sandbox-exec"
    sandboxed = True

    def __init__(self, root: Path, settings: SandboxSettings | None = None, *, model_bytes: int = 0) -> None:
        super().__init__(root, settings, model_bytes=model_bytes)
        self._tmp = Path(tempfile.mkdtemp(prefix="ribbit-tmp-"))  # the private TMPDIR

    def close(self) -> None:
        super().close()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def environment(self) -> dict[str, str]:
        return sandbox_env(os.environ, self.settings, tmpdir=str(self._tmp))

    def profile(self, access: Access) -> str:
        hidden = hidden_paths(self.settings, os.environ, extra=_ribbit_private_folders(), bound=[self.root])
        rules = [SEATBELT_PROFILE]
        if hidden:
            rules.append("(deny file-read* " + " ".join(f"(subpath {_seatbelt_string(h)})" for h in hidden) + ")\n")
            # The last matching rule wins: the repository and the home's toolchains are read again.
            home = home_dir(os.environ)
            shown = [self.root, *exposed_inside(self.settings, os.environ, hidden),
                     *(expand(w, home).resolve() for w in self.settings.writable)]
            rules.append("(allow file-read* " + " ".join(f"(subpath {_seatbelt_string(p)})" for p in shown) + ")\n")
            inner = [h for h in hidden if any(h != p and h.is_relative_to(p) for p in shown)]
            if inner:  # a login inside a shown toolchain folder (~/.cargo/credentials.toml): hidden again
                rules.append("(deny file-read* " + " ".join(f"(subpath {_seatbelt_string(h)})" for h in inner) + ")\n")
        if access == "read-write":
            rules.append('(allow file-write* (subpath (param "ROOT")))\n')
            home = home_dir(os.environ)
            for extra in self.settings.writable:
                rules.append(f"(allow file-write* (subpath {_seatbelt_string(expand(extra, home).resolve())}))\n")
        # Seatbelt matches paths, so `.git` is protected whether or not it exists yet.
        rules.append('(deny file-write* (subpath (param "GITDIR")) (literal (param "GITDIR")))\n(deny network*)\n')
        for sub in self.submodules:  # by path: a moved-away folder's replacement is covered too
            git_path = _seatbelt_string(sub.folder.resolve() / ".git")
            rules.append(f"(deny file-write* (subpath {git_path}) (literal {git_path}))\n")
        return "".join(rules)

    def wrap(self, argv: list[str], cwd: Path, access: Access, fds: list[int] | None = None) -> list[str]:
        real = lambda p: str(Path(p).resolve())  # noqa: E731 (Seatbelt matches resolved paths: /private/var/...)
        return [
            "sandbox-exec", "-p", self.profile(access),
            "-D", f"ROOT={real(self.root)}", "-D", f"TMP={real(self._tmp)}",
            "-D", f"GITDIR={real(self.root / '.git')}",
            *argv,
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


def make_runner(
    root: Path, want_sandbox: bool = True, settings: SandboxSettings | None = None, *, model_bytes: int = 0,
) -> CommandRunner:
    """`model_bytes`: what the loaded model keeps resident (agent.sandbox.caps leaves it its room)."""
    if want_sandbox and sandbox_available()[0]:
        kind = SandboxExecRunner if sys.platform == "darwin" else BwrapRunner
        return kind(root, settings, model_bytes=model_bytes)
    return LocalRunner(root, settings, model_bytes=model_bytes)


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
