"""Model SPEC (docs/contract.md) -> a backend. Only the entry point calls this."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from models.base import ChatModel, ModelError
from models.drafting import DraftMode
from models.embedded import EMBEDDED_NAME, embedded_model_path, is_embedded
from models.gguf_meta import read_metadata, trained_context

DEFAULT_SPECS = ("", "default")


class EngineOptions(BaseModel):
    """In-process engine settings from the command line (`--threads`, `--draft`, `--temperature`)."""

    threads: int | None = None  # None: cores less measured contention, or RIBBIT_THREADS
    draft: DraftMode = "auto"
    temperature: float | None = None  # None: the backend's default


# What this process's command line asked for; the entry point sets it once, load_model reads it.
_options = EngineOptions()


def set_engine_options(options: EngineOptions) -> None:
    global _options
    _options = options


def engine_options() -> EngineOptions:
    return _options


def resolve_spec(spec: str | None) -> str:
    """The SPEC to use: explicit, else $RIBBIT_MODEL, else the embedded default."""
    if spec and spec.strip():
        return spec.strip()
    return os.environ.get("RIBBIT_MODEL", "").strip() or "default"


def check_spec(spec: str | None) -> None:
    """What can be checked of a SPEC without loading it (a replay file that reads, a GGUF that is one); a
    one-line ModelError where it is wrong. An openai: server is checked by models.diagnostics."""
    spec = resolve_spec(spec)
    if spec.startswith("replay:"):
        from models.replay import load_turns

        load_turns(Path(spec[len("replay:"):].partition("#")[0]).expanduser())
    elif not spec.startswith("openai:") and spec not in DEFAULT_SPECS:
        from models.llama_backend import check_model_file

        check_model_file(Path(spec).expanduser())


def load_model(
    spec: str | None, *, context: int = 131_072, replay_delay: float = 0.0, seed: int | None = None
) -> ChatModel:
    """Load the backend a SPEC names; every failure is a one-line ModelError.

    `seed` (None: the backend's default) varies the sampling, e.g. between `ribbit eval --samples` runs.
    """
    spec = resolve_spec(spec)
    if spec.startswith("replay:"):
        from models.replay import ReplayModel

        target, _, options = spec[len("replay:"):].partition("#")
        delay = replay_delay
        for option in filter(None, options.split(",")):
            key, _, value = option.partition("=")
            if key == "delay":
                try:
                    delay = float(value)
                except ValueError:
                    raise ModelError(f"bad replay option {option!r}; expected delay=SECONDS") from None
        return ReplayModel(Path(target).expanduser(), chunk_delay=delay)
    if spec.startswith("openai:"):
        try:
            from models.openai_backend import OpenAICompatibleModel
        except ImportError:
            raise ModelError("the openai: backend is not available in this build") from None
        return OpenAICompatibleModel.from_spec(spec, context=context, seed=seed)
    path = embedded_model_path() if spec in DEFAULT_SPECS else Path(spec).expanduser()
    from models.llama_backend import LlamaCppModel

    engine = engine_options()
    extra: dict[str, Any] = {} if engine.temperature is None else {"temperature": engine.temperature}
    if seed is not None:
        extra["seed"] = seed
    model = LlamaCppModel(path, n_ctx=context_for(path, context), n_threads=engine.threads, draft=engine.draft, **extra)
    if is_embedded(path):
        model.info.name = EMBEDDED_NAME  # not the GGUF's training-run label ("Smollm2 135M 8k Lc100K Mix1 Ep2")
    return model


def context_for(path: Path, wanted: int) -> int:
    """The context to allocate: what was asked for, capped by what the model was trained on."""
    if not path.is_file():
        return wanted  # the backend reports the missing file
    trained = trained_context(read_metadata(path))
    return min(wanted, trained) if trained else wanted
