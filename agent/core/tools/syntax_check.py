"""After a Write or Edit of a Python file: does it still compile?

compile() only parses and compiles the text: nothing is run and nothing is imported, so a hostile file
costs at most its (capped) size in CPU. A small model hears about a broken indent at once, not three
steps later from a test run.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

PYTHON_SUFFIXES = frozenset({".py", ".pyi", ".pyw"})
MAX_CHECK_CHARS = 1_000_000


def python_syntax_note(path: Path, shown: str, text: str) -> str:
    """'' when `text` compiles (or is not a Python file); else a note to append to the tool's result."""
    if path.suffix not in PYTHON_SUFFIXES or len(text) > MAX_CHECK_CHARS:
        return ""
    version = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarnings (e.g. invalid escapes) must not reach the terminal
            compile(text, shown, "exec", dont_inherit=True)
    except SyntaxError as exc:  # IndentationError and TabError too
        where = f"line {exc.lineno}" if exc.lineno else "somewhere"
        source = (exc.text or "").rstrip("\n")
        shown_line = f"\n{exc.lineno:>6}\t{source[:200]}" if exc.lineno and source.strip() else ""
        return f"\n\nWarning: {shown} does not compile ({version}): {where}: {exc.msg}{shown_line}"
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return f"\n\nWarning: {shown} does not compile ({version}): {type(exc).__name__}: {exc}"
    return ""
