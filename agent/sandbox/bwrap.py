"""bubblewrap's command line: what a sandboxed command sees, laid out as mount operations.

`SandboxView` is what a command can see and change (agent.sandbox.runner.BwrapRunner works it out;
`ribbit doctor` prints it); `command_line` turns it into bwrap's arguments: the whole system read-only,
private /dev, /proc, /tmp and /dev/shm, masks over hidden paths and host sockets, the repository bound
writable (or read-only) with `.git` read-only over it, every namespace unshared, the seccomp filter.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from agent.sandbox.config import Access
from agent.sandbox.credentials import Masked

MASK_TMPFS_BYTES = 1 << 20

# Where a sandbox has its own empty, private folders; hidden or socket paths under them need no mask.
PRIVATE_TREES = (Path("/tmp"), Path("/dev"), Path("/proc"))
# Kernel-wide knobs under /proc that a fresh procfs still lets uid 0 write (bubblewrap covers /proc/irq
# and /proc/bus itself, but not these when it runs as root): mounted read-only in every command.
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger")


@dataclass(frozen=True)
class Mount:
    """One bubblewrap mount operation (with its --perms/--size prefix)."""

    op: str
    dest: Path
    src: Path | None = None
    perms: str | None = None
    size: int | None = None

    def args(self) -> list[str]:
        out: list[str] = []
        if self.perms is not None:
            out += ["--perms", self.perms]
        if self.size is not None:
            out += ["--size", str(self.size)]
        out.append(self.op)
        if self.src is not None:
            out.append(str(self.src))
        return out + [str(self.dest)]


@dataclass(frozen=True)
class SandboxView:
    """What a sandboxed command can see and change; `ribbit doctor` prints it, BwrapRunner mounts it."""

    root: Path
    access: Access
    writable: list[Path]
    hidden: list[Path]
    exposed: list[Path]
    sockets: list[Path]
    git_protected: list[Path]
    pinned: list[Path]  # mount points, so they cannot be renamed or removed: submodule folders and their parents
    tmp_bytes: int | None  # None: bubblewrap older than 0.7 cannot cap a tmpfs; /tmp is a folder on disk
    shm_bytes: int | None
    masked: list[Masked] = field(default_factory=list)  # git config files shown with credentials masked
    # (home path as named, its target): shown home paths reached through a link, bound at the named path too
    aliases: list[tuple[Path, Path]] = field(default_factory=list)


def command_line(view: SandboxView, argv: list[str], cwd: Path, *, disk_tmp: Path | None, seccomp_fd: int | None) -> list[str]:
    """bwrap's command line for `argv` in `cwd`, mounting `view`. `disk_tmp`: the folder on disk that holds
    /tmp and /dev/shm where bubblewrap cannot cap a tmpfs (None: capped tmpfs); `seccomp_fd`: the filter."""
    args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev"]
    args += _scratch("/dev/shm", view.shm_bytes, disk_tmp, "shm")
    args += ["--remount-ro", "/dev"]  # not recursive: /dev/shm stays writable, /dev itself does not
    args += ["--proc", "/proc"]
    # A fresh /proc leaves the kernel's global settings writable to uid 0 (no capability needed):
    # ribbit run as root would let a command set kernel.core_pattern or kernel.modprobe to a
    # program of its own, which the kernel then runs on the host, as root.
    for knob in PROC_READ_ONLY:
        args += ["--ro-bind-try", knob, knob]
    args += _scratch("/tmp", view.tmp_bytes, disk_tmp, "tmp")
    mounts: list[Mount] = []
    # A repository under /tmp sits on the private tmpfs: make the folders above it read-only,
    # so `../x` fails instead of quietly landing in a tmpfs that vanishes.
    for parent in view.root.parents:
        if parent.is_relative_to("/tmp") and parent != Path("/tmp"):
            # (On the disk fallback they are real folders, emptied after the command: keep them removable.)
            mounts.append(Mount("--dir", parent, perms="0755" if disk_tmp else "0555"))
    masks = [h for h in view.hidden if h.is_dir()]
    for hidden in view.hidden:
        if hidden.is_dir():
            mounts.append(Mount("--tmpfs", hidden, size=None if disk_tmp else MASK_TMPFS_BYTES))
        else:
            mounts.append(Mount("--ro-bind", hidden, src=Path("/dev/null")))
    mounts += [Mount("--ro-bind", p, src=p) for p in view.exposed]
    mounts += [Mount("--ro-bind", named, src=real) for named, real in view.aliases]
    root_op = "--bind" if view.access == "read-write" else "--ro-bind"
    mounts.append(Mount(root_op, view.root, src=view.root))
    mounts += [Mount("--bind", p, src=p) for p in view.writable if p != view.root]
    mounts += [Mount("--bind", p, src=p) for p in view.pinned]
    mounts += [Mount("--ro-bind", p, src=p) for p in view.git_protected]
    mounts += [Mount("--ro-bind", s, src=Path("/dev/null")) for s in view.sockets]
    # Git's config files with credentials masked (agent.sandbox.credentials), over the real ones.
    mounts += [Mount("--ro-bind", m.path, src=m.source) for m in view.masked]
    # Parents before children, so a later mount lands on top of (not under) an earlier one.
    mounts.sort(key=lambda m: len(m.dest.parts))
    for mount in mounts:
        args += mount.args()
    for mask in masks:
        args += ["--remount-ro", str(mask)]
    args += [
        "--unshare-all",  # network, PID, IPC, UTS, cgroup (and user, where allowed) namespaces
        "--die-with-parent",
        "--new-session",
        "--chdir", str(cwd if cwd.is_dir() else view.root),
    ]
    if os.geteuid() == 0:
        args += ["--cap-drop", "ALL"]  # as root bwrap would keep capabilities (and ignore file modes)
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args.append("--")
    return args + argv


def _scratch(dest: str, size: int | None, disk_tmp: Path | None, sub: str) -> list[str]:
    """A private, writable /tmp or /dev/shm: a capped tmpfs, or the runner's folder on disk."""
    if disk_tmp is None:
        return ["--perms", "1777", "--size", str(size), "--tmpfs", dest]
    return ["--bind", str(disk_tmp / sub), dest]


@functools.cache
def bwrap_can_cap_tmpfs() -> bool:
    """bubblewrap 0.7 added --size (Ubuntu 22.04 ships 0.6)."""
    try:
        helptext = subprocess.run(["bwrap", "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "--size" in helptext


def disk_tmp_base() -> str | None:
    """A disk-backed place for the fallback /tmp: /var/tmp where it is writable, else the default."""
    return "/var/tmp" if os.access("/var/tmp", os.W_OK) else None


def visible(path: Path, hidden: list[Path], binds: list[Path], below: bool = False) -> bool:
    """Whether the host's `path` shows in the sandbox: the innermost mount above it decides (a bind shows,
    a mask hides; a bind at the same depth is mounted later and wins). `below`: ignore a mask at `path` itself."""
    above = [m for m in (*hidden, *binds) if path.is_relative_to(m) and not (below and m == path)]
    nearest = max(above, key=lambda m: (len(m.parts), m in binds), default=None)
    return nearest is None or nearest in binds


def under_private_tree(path: Path) -> bool:
    return any(path == tree or path.is_relative_to(tree) for tree in PRIVATE_TREES)


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
