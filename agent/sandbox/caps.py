"""Memory and process caps for every command a runner starts.

A command that allocates 6 GiB makes a laptop with swap thrash long before the OOM killer acts (the
model already holds 3-10 GiB), and one that starts 3,000 processes is a fork bomb's way. So each
session gets a cgroup of its own where ribbit can make one, and its commands are placed in it:

- cgroup v2 (`memory.max`, `memory.swap.max` = 0 so the command cannot push the desktop into swap,
  `pids.max`), made beside ribbit's own cgroup (the parent must be writable, as systemd's user slices
  are) or under the root when ribbit runs as root;
- cgroup v1 (`memory.limit_in_bytes` and `memory.memsw.limit_in_bytes`, `pids.max`), made under
  ribbit's own cgroup of each hierarchy where it may (usually as root);
- else rlimits on each process of the command: `RLIMIT_DATA` (heap and private mappings; not
  `RLIMIT_AS`, which breaks runtimes that reserve address space) and `RLIMIT_NPROC`. The kernel does
  not enforce RLIMIT_NPROC for uid 0, so as root ribbit counts the command's processes itself while it
  runs (every poll, 50 ms) and kills the command past the cap.

A command joins its cgroup from inside: the runner opens the cgroup's `cgroup.procs` and the shell
writes `0` (itself) to that descriptor as its first act, before anything of the command runs; the
sandbox's file system is read-only, so the command can never move itself out. Where that write fails
(an old kernel checks the writer's cgroup namespace), the runner is told before the command ran, and
falls back to rlimits.

Defaults (sandbox.toml `memory_mb`, `max_processes`; 0 = no cap): the machine's RAM less what the
loaded model keeps resident and the desktop's share (an eighth of RAM, at least 2 GiB), at least
512 MiB; 1,024 processes (threads count).
"""

from __future__ import annotations

import errno
import os
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from models.settings import Settings

MiB = 1 << 20
GiB = 1 << 30
MIN_MEMORY_BYTES = 512 * MiB
DESKTOP_SHARE = 8  # the desktop keeps an eighth of RAM ...
DESKTOP_AT_LEAST = 2 * GiB  # ... and at least this much
DEFAULT_MAX_PROCESSES = 1024
CGROUP_ROOT = Path("/sys/fs/cgroup")
# A failed allocation as programs report it (the rlimit fallback cannot see an OOM kill).
_ALLOCATION_FAILED = re.compile(
    r"MemoryError|Cannot allocate memory|out of memory|std::bad_alloc|Killed", re.IGNORECASE,
)

Method = Literal["cgroup v2", "cgroup v1", "rlimit", "counted", "none"]


def cgroups_wanted() -> bool:
    """`RIBBIT_SANDBOX_CGROUPS=off` holds the caps with rlimits only (to compare, or where a cgroup
    ribbit makes would upset a tool that owns the tree)."""
    return Settings.read().sandbox_cgroups


def memory_total() -> int | None:
    """The RAM ribbit may count on: MemTotal, or less where its own cgroup has a memory limit."""
    total: int | None = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        return None
    limit = _own_memory_limit()
    return min(total, limit) if total is not None and limit is not None else total


def default_memory_bytes(model_bytes: int = 0, total: int | None = None) -> int | None:
    """What a command may use by default: RAM less the loaded model and the desktop's room (None:
    the RAM cannot be read)."""
    total = memory_total() if total is None else total
    if total is None:
        return None
    desktop = max(DESKTOP_AT_LEAST, total // DESKTOP_SHARE)
    return max(MIN_MEMORY_BYTES, total - model_bytes - desktop)


@dataclass(frozen=True)
class CapLimits:
    """The caps one session's commands run under (None: no cap)."""

    memory_bytes: int | None
    max_processes: int | None

    @staticmethod
    def from_settings(memory_mb: int | None, max_processes: int | None, model_bytes: int = 0) -> CapLimits:
        """sandbox.toml's values (None: the default; 0: no cap)."""
        memory = default_memory_bytes(model_bytes) if memory_mb is None else (memory_mb * MiB or None)
        processes = DEFAULT_MAX_PROCESSES if max_processes is None else (max_processes or None)
        return CapLimits(memory_bytes=memory, max_processes=processes)


def memory_text(limit: int) -> str:
    return f"{limit // MiB:,} MiB"


# -- cgroups ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CgroupMounts:
    """Where the cgroup file systems are: the v2 hierarchy, and v1's by controller."""

    v2: Path | None
    v1: dict[str, Path]

    @staticmethod
    def read() -> CgroupMounts:
        v2: Path | None = None
        v1: dict[str, Path] = {}
        try:
            lines = Path("/proc/self/mountinfo").read_text().splitlines()
        except OSError:
            return CgroupMounts(None, {})
        for line in lines:
            before, _, after = line.partition(" - ")
            fields, tail = before.split(), after.split()
            if len(fields) < 5 or len(tail) < 3:
                continue
            point = Path(_unescape(fields[4]))
            if tail[0] == "cgroup2" and v2 is None:
                v2 = point
            elif tail[0] == "cgroup":
                for option in tail[2].split(","):
                    if option in ("memory", "pids") and option not in v1:
                        v1[option] = point
        return CgroupMounts(v2, v1)


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def own_cgroups() -> dict[str, str]:
    """ribbit's own cgroup per hierarchy: "" for v2, the controller name for v1."""
    found: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            found[controller] = parts[2]
    return found


def _own_memory_limit() -> int | None:
    mounts, own = CgroupMounts.read(), own_cgroups()
    candidates: list[Path] = []
    if mounts.v2 is not None and "" in own:
        candidates.append(mounts.v2 / own[""].lstrip("/") / "memory.max")
    if "memory" in mounts.v1 and "memory" in own:
        candidates.append(mounts.v1["memory"] / own["memory"].lstrip("/") / "memory.limit_in_bytes")
    for path in candidates:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:
            return int(text)
    return None


@dataclass
class Cgroup:
    """One cgroup folder ribbit made (and removes)."""

    path: Path
    version: Literal[1, 2]

    def write(self, name: str, value: str) -> None:
        with open(self.path / name, "w") as handle:
            handle.write(value)

    def read(self, name: str) -> str:
        try:
            return (self.path / name).read_text()
        except OSError:
            return ""

    def count(self, name: str, key: str) -> int:
        """A counter from a flat-keyed file (`memory.events`, `pids.events`, `memory.oom_control`)."""
        for line in self.read(name).splitlines():
            words = line.split()
            if len(words) == 2 and words[0] == key and words[1].isdigit():
                return int(words[1])
        return 0

    def procs_fd(self) -> int:
        return os.open(self.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    def kill_all(self) -> None:
        """SIGKILL whatever is left in it (a command's processes outlive it only without a PID namespace)."""
        if self.version == 2 and (self.path / "cgroup.kill").exists():
            try:
                self.write("cgroup.kill", "1")
                return
            except OSError:
                pass
        for _ in range(10):
            pids = [int(p) for p in self.read("cgroup.procs").split() if p.isdigit()]
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def remove(self) -> None:
        self.kill_all()
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    return
                os.sched_yield()  # the killed processes are still being torn down


def _make_child(parent: Path, name: str, version: Literal[1, 2]) -> Cgroup | None:
    try:
        path = parent / name
        os.mkdir(path, 0o755)
    except OSError:
        return None
    return Cgroup(path, version)


def _group_name() -> str:
    return f"ribbit-{os.getpid()}-{os.urandom(3).hex()}"


def _sweep_stale(parent: Path) -> None:
    """Remove empty cgroups a ribbit that died left behind (a live ribbit's pid is still in use)."""
    try:
        names = [e.name for e in os.scandir(parent) if e.name.startswith("ribbit-") and e.is_dir()]
    except OSError:
        return
    for name in names:
        pid = name.split("-")[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            try:
                os.rmdir(parent / name)
            except OSError:
                pass


def _v2_parents(mount: Path, own: str) -> list[Path]:
    """Where a v2 cgroup for commands may go: under the root when ribbit runs in it (as root), else
    beside ribbit's own cgroup (a cgroup holding processes cannot give its controllers to children)."""
    here = mount / own.lstrip("/")
    if here == mount:
        return [mount]
    return [here.parent]


def make_v2(mount: Path, own: str, needs: set[str]) -> Cgroup | None:
    """A fresh v2 cgroup with the controllers in `needs` (memory, pids), or None where none can be made."""
    for parent in _v2_parents(mount, own):
        try:
            enabled = set((parent / "cgroup.subtree_control").read_text().split())
            if not needs <= enabled:
                offered = set((parent / "cgroup.controllers").read_text().split())
                if not needs <= offered:
                    continue
                (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(needs - enabled)))
            # Moving a process in needs write access to the common ancestor's cgroup.procs.
            if not os.access(parent / "cgroup.procs", os.W_OK):
                continue
        except OSError:
            continue
        _sweep_stale(parent)
        group = _make_child(parent, _group_name(), 2)
        if group is not None:
            return group
    return None


def make_v1(mount: Path, own: str) -> Cgroup | None:
    parent = mount / own.lstrip("/")
    _sweep_stale(parent)
    return _make_child(parent, _group_name(), 1)


# -- the caps of one runner ---------------------------------------------------------------------------


@dataclass
class Joining:
    """One command's way into the cgroups: the `cgroup.procs` descriptors (and a status pipe's write
    end) it inherits, the shell lines that use and close them, and the status pipe's read end, where a
    byte means the shell could not join and exited before anything of the command ran."""

    fds: list[int] = field(default_factory=list)
    lines: str = ""
    status: int = -1

    def started(self) -> None:
        """The process has its copies: close ribbit's (the status pipe's read end stays)."""
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def failed(self) -> bool:
        if self.status < 0:
            return False
        os.set_blocking(self.status, False)
        try:
            return bool(os.read(self.status, 1))
        except BlockingIOError:
            return False

    def close(self) -> None:
        self.started()
        if self.status >= 0:
            os.close(self.status)
            self.status = -1



@dataclass
class CommandCaps:
    """One session's caps and how they are held (`describe`); a command asks for `join` (descriptors to
    pass and shell lines to run first), and `verdict` after it ended."""

    limits: CapLimits
    memory: Method = "none"
    processes: Method = "none"
    groups: list[Cgroup] = field(default_factory=list)
    _memory_group: Cgroup | None = None
    _pids_group: Cgroup | None = None
    _counts: tuple[int, int] = (0, 0)  # (OOM kills, refused forks) before the running command

    @staticmethod
    def create(limits: CapLimits, *, cgroups: bool = True) -> CommandCaps:
        caps = CommandCaps(limits)
        want_memory, want_pids = limits.memory_bytes is not None, limits.max_processes is not None
        if cgroups and (want_memory or want_pids):
            caps._make_groups(want_memory, want_pids)
        if want_memory and caps._memory_group is None:
            caps.memory = "rlimit"
        if want_pids and caps._pids_group is None:
            caps.processes = "counted" if os.geteuid() == 0 else "rlimit"
        return caps

    def _make_groups(self, want_memory: bool, want_pids: bool) -> None:
        mounts, own = CgroupMounts.read(), own_cgroups()
        needs = ({"memory"} if want_memory else set()) | ({"pids"} if want_pids else set())
        if mounts.v2 is not None and "" in own:
            group = make_v2(mounts.v2, own[""], needs)
            if group is not None and self._limit_v2(group, want_memory, want_pids):
                self.groups.append(group)
                if want_memory:
                    self._memory_group, self.memory = group, "cgroup v2"
                if want_pids:
                    self._pids_group, self.processes = group, "cgroup v2"
                return
            if group is not None:
                group.remove()
        if want_memory and "memory" in mounts.v1 and "memory" in own:
            group = make_v1(mounts.v1["memory"], own["memory"])
            if group is not None and self._limit_v1_memory(group):
                self.groups.append(group)
                self._memory_group, self.memory = group, "cgroup v1"
            elif group is not None:
                group.remove()
        if want_pids and "pids" in mounts.v1 and "pids" in own:
            group = make_v1(mounts.v1["pids"], own["pids"])
            try:
                if group is not None:
                    group.write("pids.max", str(self.limits.max_processes))
                    self.groups.append(group)
                    self._pids_group, self.processes = group, "cgroup v1"
            except OSError:
                group.remove()  # type: ignore[union-attr]

    def _limit_v2(self, group: Cgroup, want_memory: bool, want_pids: bool) -> bool:
        try:
            if want_memory:
                group.write("memory.max", str(self.limits.memory_bytes))
                if (group.path / "memory.swap.max").exists():
                    group.write("memory.swap.max", "0")
            if want_pids:
                group.write("pids.max", str(self.limits.max_processes))
        except OSError:
            return False
        return True

    def _limit_v1_memory(self, group: Cgroup) -> bool:
        limit = str(self.limits.memory_bytes)
        try:
            group.write("memory.limit_in_bytes", limit)
        except OSError:
            return False
        for name, value in (("memory.memsw.limit_in_bytes", limit), ("memory.swappiness", "0")):
            try:  # swap accounting is not always on: then swappiness 0 is what keeps it out of swap
                group.write(name, value)
            except OSError:
                pass
        return True

    # -- per command --

    def join(self) -> Joining:
        """What one command needs to run under the caps: descriptors to pass and shell lines to run
        first (see Joining)."""
        joining = Joining()
        lines: list[str] = []
        try:
            for group in self.groups:
                joining.fds.append(group.procs_fd())
        except OSError:
            joining.close()
            self.fall_back()
            joining = Joining()
        if joining.fds:
            status_read, status_write = os.pipe()
            joining.fds.append(status_write)
            joining.status = status_read
            writes = " && ".join(f"echo 0 >&{fd}" for fd in joining.fds[:-1])
            # Every descriptor is closed before the command runs: it can neither move itself nor say
            # it could not join.
            lines.append(f"{{ {writes}; }} 2>/dev/null || {{ echo >&{status_write}; exit 125; }}")
            lines.append("exec " + " ".join(f"{fd}>&-" for fd in joining.fds))
        if self.memory == "rlimit" and self.limits.memory_bytes is not None:
            lines.append(f"ulimit -d {self.limits.memory_bytes // 1024} 2>/dev/null")
        if self.processes == "rlimit" and self.limits.max_processes is not None:
            lines.append(f"ulimit -u {self.limits.max_processes} 2>/dev/null")
        joining.lines = "".join(line + "\n" for line in lines)
        self._counts = self._counters()
        return joining

    def fall_back(self) -> None:
        """The cgroups cannot hold commands here: rlimits from now on."""
        for group in self.groups:
            group.remove()
        self.groups = []
        if self._memory_group is not None:
            self._memory_group, self.memory = None, "rlimit"
        if self._pids_group is not None:
            self._pids_group, self.processes = None, "counted" if os.geteuid() == 0 else "rlimit"

    def _counters(self) -> tuple[int, int]:
        oom = 0
        if self._memory_group is not None:
            group = self._memory_group
            oom = group.count("memory.events", "oom_kill") if group.version == 2 else group.count("memory.oom_control", "oom_kill")
        refused = self._pids_group.count("pids.events", "max") if self._pids_group is not None else 0
        return oom, refused

    def too_many(self, pid: int) -> str | None:
        """As root without a pids cgroup: the command's processes, counted (None: under the cap)."""
        cap = self.limits.max_processes
        if self.processes != "counted" or cap is None:
            return None
        if count_descendants(pid, cap + 1) <= cap:
            return None
        return f"killed: more than {cap:,} processes (the cap; sandbox.toml max_processes)"

    def verdict(self, output: str, exit_code: int | None) -> str | None:
        """What the command ran into, one line for the model (None: no cap was reached)."""
        oom, refused = self._counters()
        lines = []
        memory = self.limits.memory_bytes
        if memory is not None and oom > self._counts[0]:
            lines.append(f"killed: out of memory (cap {memory_text(memory)})")
        elif memory is not None and self.memory == "rlimit" and exit_code not in (0, None) and _ALLOCATION_FAILED.search(output[-4096:]):
            lines.append(f"an allocation may have failed at the memory cap ({memory_text(memory)} a process)")
        if refused > self._counts[1]:
            lines.append(f"{refused - self._counts[1]:,} process starts refused (cap {self.limits.max_processes:,} processes)")
        return "; ".join(lines) or None

    def describe(self) -> str:
        """For `ribbit doctor` and the status line: each cap and how it is held."""
        parts = []
        memory, processes = self.limits.memory_bytes, self.limits.max_processes
        if memory is None:
            parts.append("memory: no cap")
        else:
            how = {"rlimit": "RLIMIT_DATA on each process", "none": "not held"}.get(self.memory, self.memory)
            parts.append(f"memory {memory_text(memory)} ({how})")
        if processes is None:
            parts.append("processes: no cap")
        else:
            how = {
                "rlimit": "RLIMIT_NPROC", "counted": "counted by ribbit, as root without a cgroup", "none": "not held",
            }.get(self.processes, self.processes)
            parts.append(f"{processes:,} processes ({how})")
        return ", ".join(parts)

    def close(self) -> None:
        for group in self.groups:
            group.remove()
        self.groups = []


def count_descendants(pid: int, stop_at: int) -> int:
    """Processes under `pid` (itself included), stopping once `stop_at` are found."""
    seen = 0
    stack = [pid]
    while stack and seen < stop_at:
        current = stack.pop()
        seen += 1
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    stack += [int(c) for c in handle.read().split()]
            except (OSError, ValueError):
                continue
    return seen
