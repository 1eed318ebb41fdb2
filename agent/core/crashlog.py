"""Where an unexpected exception's traceback goes: a file, so the user sees one line, not a stack."""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path

from agent.paths import state_home
from models.text import one_line as printable_line


def save_traceback(exc: BaseException) -> Path | None:
    """Write `exc`'s traceback under the state folder; its path, or None if it could not be written."""
    folder = state_home() / "crashes"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        path.write_text(text, encoding="utf-8", errors="backslashreplace")
        return path
    except (OSError, RecursionError):
        return None


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, for the model or a notice."""
    detail = printable_line(str(exc).strip().splitlines()[0], 200) if str(exc).strip() else ""
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def describe(exc: BaseException) -> str:
    """One line naming an unexpected exception and where its traceback was saved."""
    saved = save_traceback(exc)
    return one_line(exc) + (f" (traceback in {saved})" if saved else "")
