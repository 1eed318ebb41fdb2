"""How many threads llama.cpp gets, and why: the machine's cores, less what other programs measurably use.

- Default: the physical cores this process may run on. A second hardware thread on the same core (SMT)
  shares that core's load/store units, which is what decoding is bound by, and llama.cpp's threads wait
  for each other at every matrix multiply, so a thread that is slower than the rest slows all of them.
- Contention is measured, never guessed from the load average: the busy CPU time of the whole machine
  (/proc/stat) minus this process's own CPU time, over a window. The load average counts tasks blocked on
  disk and lags by a minute: on an idle machine doing some I/O it read 0.9, and a plan that believed it
  ran one thread of two and decoded at 0.58x of what the machine could do.
- `--threads N` or RIBBIT_THREADS=N fix the number; nothing adapts then.

`ContentionMeter` measures over any interval (a model load, an assistant turn); `ThreadPolicy` turns what
it measured into a thread count, with hysteresis so that one noisy turn does not flip it back and forth.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from models.base import ModelError
from models.settings import Settings, env_name

THREADS_ENV = env_name("threads")
# Other programs must keep this much of a core busy, on average, before a thread is given up to them.
BUSY_CORE = 0.75
# A window shorter than this measures scheduling noise, not contention.
MIN_WINDOW_S = 0.1

Source = Literal["cores", "flag", "env", "measured"]


class ThreadChoice(BaseModel):
    """The thread count llama.cpp runs with and the reason, for `ribbit doctor` and the status bar."""

    n_threads: int
    source: Source
    cores: int  # physical cores this process may use
    logical: int  # hardware threads this process may use
    others_busy: float | None = None  # cores' worth of CPU other programs used, when measured

    def reason(self) -> str:
        smt = f" ({self.logical} hardware threads)" if self.logical != self.cores else ""
        if self.source == "flag":
            return f"{self.n_threads} threads (--threads)"
        if self.source == "env":
            return f"{self.n_threads} threads ({THREADS_ENV})"
        busy = f"; other programs use {self.others_busy:.1f} cores" if self.others_busy is not None else ""
        if self.source == "measured" and self.n_threads < self.cores:
            return f"{self.n_threads} of {self.cores} cores{smt}: other programs measured busy on {self.others_busy:.1f}"
        return f"{self.n_threads} threads = {self.cores} physical cores{smt}{busy}"

    def short(self) -> str:
        """A few characters for the status bar."""
        if self.source in ("flag", "env"):
            return f"{self.n_threads}t fixed"
        if self.n_threads < self.cores:
            return f"{self.n_threads}/{self.cores}t busy"
        return f"{self.n_threads}t"


def allowed_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def physical_cores(cpus: list[int] | None = None, sysfs: Path = Path("/sys/devices/system/cpu")) -> int:
    """Distinct (package, core) pairs among `cpus`; the logical count where the topology is unknown."""
    cpus = allowed_cpus() if cpus is None else cpus
    seen = set()
    for cpu in cpus:
        topology = sysfs / f"cpu{cpu}" / "topology"
        try:
            core = (topology / "core_id").read_text().strip()
            package = (topology / "physical_package_id").read_text().strip()
        except OSError:
            return max(1, len(cpus))
        seen.add((package, core))
    return max(1, len(seen))


def threads_override(flag: int | None, env: dict[str, str] | None = None) -> tuple[int, Source] | None:
    """An explicit thread count from --threads or RIBBIT_THREADS; ModelError for a bad value."""
    if flag is not None:
        if flag < 1:
            raise ModelError(f"--threads must be at least 1, not {flag}")
        return flag, "flag"
    raw = Settings.read(env).threads
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ModelError(f"{THREADS_ENV}={raw!r} is not a whole number") from None
    if value < 1:
        raise ModelError(f"{THREADS_ENV} must be at least 1, not {value}")
    return value, "env"


def _machine_busy_jiffies(stat: Path = Path("/proc/stat")) -> int | None:
    """Busy time of all CPUs together, in clock ticks: user, nice, system, irq, softirq and steal
    (a hypervisor running someone else on our core is contention too)."""
    try:
        first = stat.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not first or first[0] != "cpu" or len(first) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in first[1:9])
    return user + nice + system + irq + softirq + steal


@dataclass
class _Mark:
    wall: float
    own_cpu: float
    busy: int | None


class ContentionMeter:
    """Cores' worth of CPU time used by other programs between `start()` and `stop()`."""

    def __init__(self, stat: Path = Path("/proc/stat")) -> None:
        self.stat = stat
        self.tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        self._mark: _Mark | None = None

    def _now(self) -> _Mark:
        times = os.times()
        return _Mark(time.monotonic(), times.user + times.system, _machine_busy_jiffies(self.stat))

    def start(self) -> None:
        self._mark = self._now()

    def stop(self, min_window: float = MIN_WINDOW_S) -> float | None:
        """Other programs' average busy cores since start(); None when unknown or the window is too short."""
        if self._mark is None:
            return None
        begin = self._mark
        end = self._now()
        self._mark = None
        wall = end.wall - begin.wall
        if begin.busy is None or end.busy is None or wall < min_window:
            return None
        machine = (end.busy - begin.busy) / self.tick
        own = end.own_cpu - begin.own_cpu
        return max(0.0, (machine - own) / wall)


class ThreadPolicy:
    """Chooses llama.cpp's thread count, and revises it from what each turn measured."""

    def __init__(self, flag: int | None = None, env: dict[str, str] | None = None,
                 cpus: list[int] | None = None, cores: int | None = None) -> None:
        cpus = allowed_cpus() if cpus is None else cpus
        self.logical = max(1, len(cpus))
        self.cores = cores or physical_cores(cpus)
        self.fixed = threads_override(flag, env)
        if self.fixed is not None:
            self.choice = ThreadChoice(n_threads=self.fixed[0], source=self.fixed[1], cores=self.cores, logical=self.logical)
        else:
            self.choice = ThreadChoice(n_threads=self.cores, source="cores", cores=self.cores, logical=self.logical)

    def observe(self, others_busy: float | None) -> ThreadChoice:
        """Take one measurement (other programs' busy cores over a window) into account."""
        if self.fixed is not None or others_busy is None:
            return self.choice
        # Give a core up only when others keep most of one busy; take it back once they mostly stop.
        if others_busy >= BUSY_CORE:
            wanted = max(1, self.cores - int(others_busy + (1 - BUSY_CORE)))
        elif others_busy < 1 - BUSY_CORE:
            wanted = self.cores
        else:
            wanted = self.choice.n_threads  # in between: keep what we have
        self.choice = ThreadChoice(
            n_threads=wanted, source="measured", cores=self.cores, logical=self.logical, others_busy=round(others_busy, 2)
        )
        return self.choice
