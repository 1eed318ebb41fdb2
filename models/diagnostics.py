"""`ribbit doctor` lines about models: llama.cpp, the embedded default, the configured SPEC."""

from __future__ import annotations

import os

from pydantic import BaseModel


class ModelCheck(BaseModel):
    name: str
    ok: bool
    detail: str


def model_checks() -> list[ModelCheck]:
    from models.base import ModelError
    from models.embedded import embedded_model_path
    from models.spec import resolve_spec

    checks: list[ModelCheck] = []
    try:
        import llama_cpp

        checks.append(ModelCheck(name="llama.cpp", ok=True, detail=f"llama-cpp-python {llama_cpp.__version__}"))
    except ImportError as exc:
        checks.append(ModelCheck(name="llama.cpp", ok=False, detail=f"llama-cpp-python cannot be imported: {exc}"))
    try:
        path = embedded_model_path()
        checks.append(ModelCheck(name="embedded model", ok=True, detail=f"{path.name} ({path.stat().st_size / 2**20:.0f} MiB)"))
    except ModelError as exc:
        checks.append(ModelCheck(name="embedded model", ok=False, detail=str(exc)))
    checks.append(ModelCheck(name="model SPEC", ok=True, detail=resolve_spec(None) + (" (from RIBBIT_MODEL)" if os.environ.get("RIBBIT_MODEL") else "")))
    checks.append(ModelCheck(name="threads", ok=True, detail=f"{os.cpu_count()} cores"))
    checks.append(memory_check(resolve_spec(None)))
    return checks


def memory_check(spec: str) -> ModelCheck:
    """The memory planner's choice for the configured GGUF (context, KV type, batch, threads), or why it won't fit."""
    from pathlib import Path

    from models.base import ModelError
    from models.embedded import embedded_model_path
    from models.memory import plan_memory
    from models.spec import DEFAULT_SPECS

    if spec.startswith(("openai:", "replay:")):
        return ModelCheck(name="memory plan", ok=True, detail=f"not needed for {spec.split(':', 1)[0]}: models")
    try:
        path = embedded_model_path() if spec in DEFAULT_SPECS else Path(spec).expanduser()
        if not path.is_file():
            return ModelCheck(name="memory plan", ok=False, detail=f"{path} does not exist")
        return ModelCheck(name="memory plan", ok=True, detail=plan_memory(path, 131_072).describe())
    except ModelError as exc:
        return ModelCheck(name="memory plan", ok=False, detail=str(exc))
