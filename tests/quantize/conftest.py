"""Session-wide tiny checkpoints (built once, a few seconds each) and their conversions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from quantize.convert import convert_checkpoint
from tests.quantize.checkpoints import make_llama, make_qwen3, make_qwen35

BUILDERS: dict[str, Callable[[Path], Path]] = {"qwen35": make_qwen35, "qwen3": make_qwen3, "llama": make_llama}


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    made: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in made:
            made[arch] = BUILDERS[arch](tmp_path_factory.mktemp(f"ckpt-{arch}") / arch)
        return made[arch]

    return get


@pytest.fixture(scope="session")
def converted(checkpoints: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    """(arch, weight dtype) -> converted GGUF path, cached for the session."""
    made: dict[tuple[str, str], Path] = {}

    def get(arch: str, dtype: str = "bf16") -> Path:
        key = (arch, dtype)
        if key not in made:
            out = tmp_path_factory.mktemp(f"gguf-{arch}-{dtype}") / f"{arch}-{dtype}.gguf"
            convert_checkpoint(checkpoints(arch), out, weight_dtype=dtype)  # type: ignore[arg-type]
            made[key] = out
        return made[key]

    return get
