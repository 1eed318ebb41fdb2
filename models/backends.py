"""Model backends by SPEC (docs/contract.md): the one registry every SPEC goes through.

A backend owns its SPEC prefix, how a SPEC of it is parsed and loaded, its form in `--model`'s help, the
short name reports give it, and its `ribbit doctor` lines. A new backend is its module (the ChatModel)
and one entry in BACKENDS; the built-in ones take the same path. Only the entry point loads a model, and
it passes its command line's engine options to the loader (`load_model(..., engine=...)`).
Heavy modules (llama.cpp) are imported only when a backend loads or checks a model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from models.base import ChatModel, ModelCheck, ModelError
from models.drafting import DraftMode
from models.settings import Settings

DEFAULT_SPECS = ("", "default")
SPEC_CHECK = "model SPEC"  # the name of doctor's line about the SPEC itself


class EngineOptions(BaseModel):
    """In-process engine settings from the command line (`--threads`, `--draft`, `--temperature`)."""

    threads: int | None = None  # None: cores less measured contention, or RIBBIT_THREADS
    draft: DraftMode = "auto"
    temperature: float | None = None  # None: the backend's default


class Backend(ABC):
    """One kind of model SPEC."""

    prefix: ClassVar[str]  # what its SPECs start with ("openai:"); "" for the fallback (a GGUF path)
    form: ClassVar[str]  # its SPEC's form in help texts ("openai:URL[#MODEL]")
    in_process: ClassVar[bool] = False  # runs the weights in ribbit's process: memory plan, threads, drafting

    @abstractmethod
    def load(self, spec: str, *, context: int, engine: EngineOptions, seed: int | None, replay_delay: float) -> ChatModel:
        """The model a SPEC names; every failure is a one-line ModelError."""

    def label(self, spec: str) -> str:
        """What a reader calls the model in a report."""
        return spec

    def key(self, spec: str) -> str:
        """A readable part for folder and file names (ribbit eval's results)."""
        return spec.rsplit("/", 1)[-1] or spec

    def spec_check(self, spec: str, origin: str) -> ModelCheck:
        """Doctor's line about the SPEC (`origin`: where it came from, e.g. " (from RIBBIT_MODEL)")."""
        return ModelCheck(name=SPEC_CHECK, ok=True, detail=f"{spec}{origin}")

    def checks(self, spec: str) -> list[ModelCheck]:
        """Doctor's further lines (a server's, say)."""
        return []

    def prepare(self, spec: str) -> None:
        """Before a run that starts commands (ribbit eval): what must be read first; ModelError if bad."""


class GgufBackend(Backend):
    """A GGUF file run in-process by llama.cpp; `default` is the embedded model."""

    prefix = ""
    form = "default, /path/model.gguf"
    in_process = True

    def load(self, spec: str, *, context: int, engine: EngineOptions, seed: int | None, replay_delay: float) -> ChatModel:
        from models.embedded import EMBEDDED_NAME, is_embedded
        from models.llama_backend import LlamaCppModel

        path = gguf_path(spec)
        extra: dict[str, Any] = {} if engine.temperature is None else {"temperature": engine.temperature}
        if seed is not None:
            extra["seed"] = seed
        model = LlamaCppModel(path, n_ctx=context_for(path, context), n_threads=engine.threads, draft=engine.draft, **extra)
        if is_embedded(path):
            model.info.name = EMBEDDED_NAME  # not the GGUF's training-run label ("Smollm2 135M 8k Lc100K Mix1 Ep2")
        return model

    def label(self, spec: str) -> str:
        return "default" if spec in DEFAULT_SPECS else Path(spec).name or spec

    def spec_check(self, spec: str, origin: str) -> ModelCheck:
        """A GGUF that is there and is one, and whether its chat template has tool calls."""
        from models.dialects import FALLBACK, detect_dialect
        from models.embedded import DEMO_LIMITS, WORKING_MODELS, is_embedded
        from models.gguf_meta import read_metadata
        from models.llama_backend import check_model_file

        if spec in DEFAULT_SPECS:
            return ModelCheck(name=SPEC_CHECK, ok=True, detail=f"default{origin}: the embedded model, {DEMO_LIMITS}; {WORKING_MODELS}")
        path = Path(spec).expanduser()
        try:
            check_model_file(path)
            template = read_metadata(path).get("tokenizer.chat_template")
        except ModelError as exc:
            return ModelCheck(name=SPEC_CHECK, ok=False, detail=f"{exc}{origin}")
        except (OSError, ValueError) as exc:
            return ModelCheck(name=SPEC_CHECK, ok=False, detail=f"cannot read {path}: {exc}{origin}")
        if is_embedded(path):
            return ModelCheck(name=SPEC_CHECK, ok=True, detail=f"{path}{origin}: the embedded model, {DEMO_LIMITS}; {WORKING_MODELS}")
        dialect = detect_dialect(template) if isinstance(template, str) and template else FALLBACK.name
        if dialect == FALLBACK.name:
            calls = ("its chat template has no tool calls: ribbit asks for plain JSON calls, which models not trained "
                     "for them rarely write (it may answer without editing)")
        else:
            calls = f"tool calls in the {dialect} format its chat template teaches"
        return ModelCheck(name=SPEC_CHECK, ok=True, detail=f"{path}{origin}: {calls}")


class OpenAIBackend(Backend):
    """A server that speaks OpenAI's chat completions (llama-server, vLLM, a hosted API)."""

    prefix = "openai:"
    form = "openai:URL[#MODEL]"

    def load(self, spec: str, *, context: int, engine: EngineOptions, seed: int | None, replay_delay: float) -> ChatModel:
        try:
            from models.openai_backend import OpenAICompatibleModel
        except ImportError:
            raise ModelError("the openai: backend is not available in this build") from None
        return OpenAICompatibleModel.from_spec(spec, context=context, seed=seed)

    def label(self, spec: str) -> str:
        """The served model's name, else the server's host."""
        target = spec[len(self.prefix):].split("?", 1)[0]
        url, _, name = target.partition("#")
        return name.strip() or url.split("://", 1)[-1].split("/", 1)[0]

    def key(self, spec: str) -> str:
        return self.label(spec)  # the served model, not the URL's tail and the options

    def spec_check(self, spec: str, origin: str) -> ModelCheck:
        return ModelCheck(name=SPEC_CHECK, ok=True, detail=f"{spec}{origin} (the server: see endpoint below)")

    def checks(self, spec: str) -> list[ModelCheck]:
        from models.openai_backend import endpoint_checks

        return endpoint_checks(spec)

    def prepare(self, spec: str) -> None:
        """Read the key now (and so take it out of the environment that Bash and the tests would inherit)."""
        from models.openai_backend import api_key_for, parse_spec

        api_key_for(parse_spec(spec))


class ReplayBackend(Backend):
    """Recorded turns played back (the tests' deterministic model): `replay:FILE[#delay=SECONDS]`."""

    prefix = "replay:"
    form = "replay:FILE"

    def load(self, spec: str, *, context: int, engine: EngineOptions, seed: int | None, replay_delay: float) -> ChatModel:
        from models.replay import ReplayModel

        target, _, options = spec[len(self.prefix):].partition("#")
        delay = replay_delay
        for option in filter(None, options.split(",")):
            key, _, value = option.partition("=")
            if key == "delay":
                try:
                    delay = float(value)
                except ValueError:
                    raise ModelError(f"bad replay option {option!r}; expected delay=SECONDS") from None
        return ReplayModel(Path(target).expanduser(), chunk_delay=delay)

    def label(self, spec: str) -> str:
        return self.prefix + "/".join(self._file(spec).parts[-2:])

    def spec_check(self, spec: str, origin: str) -> ModelCheck:
        from models.replay import load_turns

        try:
            turns = load_turns(self._file(spec).expanduser())
        except ModelError as exc:
            return ModelCheck(name=SPEC_CHECK, ok=False, detail=f"{spec}{origin}: {exc}")
        return ModelCheck(name=SPEC_CHECK, ok=True, detail=f"{spec}{origin}: {len(turns)} recorded turns")

    def _file(self, spec: str) -> Path:
        return Path(spec[len(self.prefix):].partition("#")[0])


# Every backend by prefix; a SPEC no prefix matches is a GGUF path (the "" entry).
BACKENDS: dict[str, Backend] = {b.prefix: b for b in (OpenAIBackend(), ReplayBackend(), GgufBackend())}


def backend_for(spec: str) -> Backend:
    """The backend whose prefix a SPEC starts with (the longest that matches), else the GGUF one."""
    matching = [prefix for prefix in BACKENDS if prefix and spec.startswith(prefix)]
    return BACKENDS[max(matching, key=len)] if matching else BACKENDS[""]


def spec_forms() -> str:
    """The SPEC forms for help texts: "default, /path/model.gguf, openai:URL[#MODEL], replay:FILE"."""
    return ", ".join(b.form for b in sorted(BACKENDS.values(), key=lambda b: b.prefix != ""))


def resolve_spec(spec: str | None) -> str:
    """The SPEC to use: explicit, else $RIBBIT_MODEL, else the embedded default."""
    if spec and spec.strip():
        return spec.strip()
    return Settings.read().model or "default"


def load_model(
    spec: str | None, *, context: int = 131_072, replay_delay: float = 0.0, seed: int | None = None,
    engine: EngineOptions | None = None,
) -> ChatModel:
    """Load the model a SPEC names; every failure is a one-line ModelError.

    `seed` (None: the backend's default) varies the sampling, e.g. between `ribbit eval --samples` runs;
    `engine`: the command line's engine options (None: the defaults)."""
    spec = resolve_spec(spec)
    return backend_for(spec).load(spec, context=context, engine=engine or EngineOptions(), seed=seed, replay_delay=replay_delay)


def gguf_path(spec: str) -> Path:
    """The file a GGUF SPEC names (`default`: the embedded model)."""
    from models.embedded import embedded_model_path

    return embedded_model_path() if spec in DEFAULT_SPECS else Path(spec).expanduser()


def context_for(path: Path, wanted: int) -> int:
    """The context to allocate: what was asked for, capped by what the model was trained on."""
    from models.gguf_meta import read_metadata, trained_context

    if not path.is_file():
        return wanted  # the backend reports the missing file
    trained = trained_context(read_metadata(path))
    return min(wanted, trained) if trained else wanted
