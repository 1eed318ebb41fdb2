"""A dependency-free progress bar with ETA, drawn on stderr."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _fmt_time(seconds: float) -> str:
    s = int(max(0, seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


_open_line: list[TextIO] = []  # a stream whose bar was drawn without its newline yet


def end_line() -> None:
    """Finish a half-drawn bar so the next message starts on its own line."""
    while _open_line:
        stream = _open_line.pop()
        stream.write("\n")
        stream.flush()


class ProgressBar:
    """Redraws in place on a terminal; elsewhere (logs, CI) prints a line every 10 %."""

    def __init__(self, label: str, total: float, unit: str = "B", stream: TextIO | None = None) -> None:
        self.label, self.total, self.unit = label, max(total, 1), unit
        self.stream = stream or sys.stderr
        self.done = 0.0
        self.start = time.monotonic()
        self._last_draw = 0.0
        self._last_decile = -1
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def update(self, amount: float) -> None:
        self.set(self.done + amount)

    def set(self, done: float) -> None:
        self.done = min(done, self.total)
        now = time.monotonic()
        if self._tty:
            if now - self._last_draw >= 0.2 or self.done >= self.total:
                self._last_draw = now
                self.stream.write("\r" + self.line())
                self.stream.flush()
                if self.stream not in _open_line:
                    _open_line.append(self.stream)
        else:
            decile = int(10 * self.done / self.total)
            if decile > self._last_decile:
                self._last_decile = decile
                self.stream.write(self.line() + "\n")
                self.stream.flush()

    def line(self) -> str:
        frac = self.done / self.total
        elapsed = time.monotonic() - self.start
        eta = elapsed * (1 - frac) / frac if frac > 0 else 0.0
        width = 28
        bar = "#" * int(width * frac) + "-" * (width - int(width * frac))
        if self.unit == "B":
            amount = f"{self.done / 1e9:.2f}/{self.total / 1e9:.2f} GB"
        else:
            amount = f"{int(self.done)}/{int(self.total)} {self.unit}"
        return f"{self.label:<9} [{bar}] {frac:6.1%} {amount}  elapsed {_fmt_time(elapsed)}  ETA {_fmt_time(eta)}"

    def finish(self) -> None:
        self.set(self.total)
        if self._tty:
            end_line()
