"""``--calibrate DIR``: an importance matrix from the text of a repository's tracked files.

The best calibration text for a coding assistant is the code it will read. The files are those git
tracks under DIR (so build output, virtual environments and secrets in .gitignore stay out), listed by
the caller's `list_tracked` (ribbit passes its hardened git, agent.git.tracked_files: DIR's own config,
its core.fsmonitor or hooks, runs nothing; quantize itself never starts git), read in a
fixed shuffled order so that a budget smaller than the repository samples all of it; binary files and
files over MAX_FILE_BYTES (lock files, data, minified bundles) are left out. The model runs in a child
process (quantize/_calibrate_worker.py) and the matrix is written in llama.cpp's GGUF imatrix format.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from quantize.convert import partial_path
from quantize.errors import QuantizeError
from quantize.imatrix import read_imatrix
from quantize.worker import run_worker

# About 4 minutes on two cores for FrogNano's BF16 (docs/performance.md), as long as quantising itself;
# the matrix's gain flattens out well before (docs/quantize.md).
DEFAULT_TOKENS = 4096
MIN_TOKENS = 64
MAX_FILE_BYTES = 512 * 1024
_TEXT_BYTES_PER_TOKEN = 16  # read at most this much text per token of budget: code is 3-4 bytes a token


@dataclass(frozen=True)
class CalibrationText:
    directory: Path
    files: list[Path]  # tracked text files, in the order to read them
    n_tracked: int
    dataset: str  # what the matrix says it was computed on: <repository>/<DIR>@<commit>


@dataclass(frozen=True)
class CalibrationResult:
    path: Path
    entries: int  # weights the matrix covers
    tokens: int
    chunks: int
    chunk_size: int
    seconds: float


def check_budget(tokens: int) -> None:
    if tokens < MIN_TOKENS:
        raise QuantizeError(f"--calibrate-tokens must be at least {MIN_TOKENS} (got {tokens})")


class Tracked(Protocol):
    """What git tracks under a folder: the repository's work tree, the files, the commit (None: none yet)."""

    @property
    def top(self) -> Path: ...
    @property
    def files(self) -> list[Path]: ...
    @property
    def head(self) -> str | None: ...


# Lists what git tracks under a folder; raises LookupError (one line) when it cannot.
ListTracked = Callable[[Path], Tracked]


def _is_text(path: Path) -> bool:
    try:
        if not path.is_file() or path.is_symlink():
            return False
        size = path.stat().st_size
        if size == 0 or size > MAX_FILE_BYTES:
            return False
        data = path.read_bytes()
    except OSError:
        return False
    if b"\0" in data[:8192]:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def calibration_text(directory: Path, tokens: int, list_tracked: ListTracked) -> CalibrationText:
    """The files to calibrate on; QuantizeError (one line) when DIR gives none."""
    if not directory.is_dir():
        raise QuantizeError("not a directory (--calibrate takes a folder in a git repository)", directory)
    try:
        tracked = list_tracked(directory)
    except LookupError as exc:
        raise QuantizeError(str(exc), directory) from None
    top = tracked.top
    listed = list(tracked.files)
    if not listed:
        raise QuantizeError("git tracks no files here; nothing to calibrate on", directory)
    order = sorted(listed)
    random.Random(0).shuffle(order)  # fixed: the same tree gives the same matrix
    files: list[Path] = []
    enough = tokens * _TEXT_BYTES_PER_TOKEN
    for path in order:
        if enough <= 0:
            break
        if _is_text(path):
            files.append(path)
            enough -= path.stat().st_size
    if not files:
        raise QuantizeError(f"none of the {len(listed)} tracked files here is text (binary, empty, or over "
                            f"{MAX_FILE_BYTES // 1024} KiB); nothing to calibrate on", directory)
    head = tracked.head or "uncommitted"
    where = directory.resolve().relative_to(top.resolve()) if directory.resolve() != top.resolve() else Path()
    dataset = f"{top.name}/{where}@{head}" if str(where) != "." else f"{top.name}@{head}"
    return CalibrationText(directory, files, len(listed), dataset)


def calibrate(
    model: Path, text: CalibrationText, out: Path, *, tokens: int = DEFAULT_TOKENS, progress: bool = False,
    say: Callable[[str], None] | None = None,
) -> CalibrationResult:
    """Run `model` (a GGUF; best its F16/BF16 form) over `text` and write the importance matrix to `out`."""
    check_budget(tokens)
    started = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_path(out)
    files = "\0".join(os.fsdecode(f) for f in text.files)
    try:
        run_worker("quantize._calibrate_worker", [str(model), str(tmp), str(tokens), text.dataset],
                   what="calibration", about=model, label="calibrate", unit="tokens", progress=progress,
                   stdin=files, say=say)
        with tmp.open("rb") as written:
            os.fsync(written.fileno())
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    matrix = read_imatrix(out)
    seen = max((int(e.counts.max()) for e in matrix.entries.values()), default=0)
    return CalibrationResult(out, len(matrix.entries), seen, matrix.chunk_count, matrix.chunk_size,
                             time.monotonic() - started)
