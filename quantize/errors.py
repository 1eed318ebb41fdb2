"""The one error type the converter raises: a single line that names the offending file."""

from __future__ import annotations

from pathlib import Path


class QuantizeError(Exception):
    """A user-facing failure. ``str(err)`` is one line, starting with the file it concerns."""

    def __init__(self, message: str, path: Path | str | None = None) -> None:
        text = " ".join(message.split())  # one line, whatever the caller passed
        super().__init__(f"{path}: {text}" if path is not None else text)
        self.path = Path(path) if path is not None else None
