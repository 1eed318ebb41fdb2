"""`ribbit doctor` lines about models: llama.cpp, the embedded default, the configured SPEC."""

from __future__ import annotations

import os

from pydantic import BaseModel


class ModelCheck(BaseModel):
    name: str
    ok: bool
    detail: str


def model_checks(spec: str | None = None) -> list[ModelCheck]:
    """The lines for `ribbit doctor [--model SPEC]`."""
    from models.base import ModelError
    from models.embedded import DEMO_LIMITS, EMBEDDED_NAME, FROGNANO_SOURCE, SMALL_TOOL_MODELS, embedded_model
    from models.spec import resolve_spec

    checks: list[ModelCheck] = []
    try:
        import llama_cpp

        checks.append(ModelCheck(name="llama.cpp", ok=True, detail=f"llama-cpp-python {llama_cpp.__version__}{buffers_note(llama_cpp)}"))
    except ImportError as exc:
        checks.append(ModelCheck(name="llama.cpp", ok=False, detail=f"llama-cpp-python cannot be imported: {exc}"))
    try:
        embedded = embedded_model()
        size = embedded.path.stat().st_size / 2**20
        checks.append(ModelCheck(name="embedded model", ok=True,
                                 detail=f"{EMBEDDED_NAME}, {DEMO_LIMITS}; {embedded.path} ({size:.0f} MiB): {embedded.note}"))
    except ModelError as exc:
        checks.append(ModelCheck(name="embedded model", ok=False, detail=str(exc)))
    chosen = resolve_spec(spec)
    origin = " (from RIBBIT_MODEL)" if not spec and os.environ.get("RIBBIT_MODEL") else ""
    checks.append(spec_check(chosen, origin))
    checks.append(ModelCheck(name="models that edit", ok=True, detail=f"{FROGNANO_SOURCE}; {SMALL_TOOL_MODELS}"))
    checks.append(threads_check())
    checks.append(memory_check(chosen))
    checks.append(drafting_check(chosen))
    if chosen.startswith("openai:"):
        checks += endpoint_checks(chosen)
    return checks


def buffers_note(llama_cpp: object) -> str:
    """Why weights stay in plain buffers on an AMX build (models.llama_runtime's guard), or nothing."""
    from models.llama_runtime import KEEP_AMX_ENV, amx_in_build, extra_buffers_off

    if extra_buffers_off(llama_cpp):
        return (f"; built with AMX, whose kernels segfault on some machines (llama.cpp#20824): weights stay in "
                f"plain buffers, no AMX and no repacking ({KEEP_AMX_ENV}=1 keeps them; a build without AMX: "
                "CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=ON ...' pip install --force-reinstall "
                "--no-cache-dir llama-cpp-python)")
    if amx_in_build(llama_cpp):
        return f"; built with AMX, kept ({KEEP_AMX_ENV}=1)"
    return ""


ENDPOINT_CHECKS = ("endpoint", "API key", "served model")
# The lines whose `!!` makes `ribbit doctor` exit 1: ribbit cannot work as configured without them.
NEEDED = ("llama.cpp", "embedded model", "model SPEC", *ENDPOINT_CHECKS)


def spec_check(chosen: str, origin: str = "") -> ModelCheck:
    """The model SPEC as ribbit would load it: a GGUF that is there and is one (and whether its chat template
    has tool calls), a replay file that reads; an openai: SPEC's server is checked by endpoint_checks."""
    from pathlib import Path

    from models.base import ModelError
    from models.embedded import DEMO_LIMITS, WORKING_MODELS, is_embedded
    from models.spec import DEFAULT_SPECS

    name = "model SPEC"
    if chosen in DEFAULT_SPECS:
        return ModelCheck(name=name, ok=True, detail=f"default{origin}: the embedded model, {DEMO_LIMITS}; {WORKING_MODELS}")
    if chosen.startswith("openai:"):
        return ModelCheck(name=name, ok=True, detail=f"{chosen}{origin} (the server: see endpoint below)")
    if chosen.startswith("replay:"):
        from models.replay import load_turns

        try:
            turns = load_turns(Path(chosen[len("replay:"):].partition("#")[0]).expanduser())
        except ModelError as exc:
            return ModelCheck(name=name, ok=False, detail=f"{chosen}{origin}: {exc}")
        return ModelCheck(name=name, ok=True, detail=f"{chosen}{origin}: {len(turns)} recorded turns")
    from models.gguf_meta import read_metadata
    from models.llama_backend import check_model_file

    path = Path(chosen).expanduser()
    try:
        check_model_file(path)
        template = read_metadata(path).get("tokenizer.chat_template")
    except ModelError as exc:
        return ModelCheck(name=name, ok=False, detail=f"{exc}{origin}")
    except (OSError, ValueError) as exc:
        return ModelCheck(name=name, ok=False, detail=f"cannot read {path}: {exc}{origin}")
    if is_embedded(path):
        return ModelCheck(name=name, ok=True, detail=f"{path}{origin}: the embedded model, {DEMO_LIMITS}; {WORKING_MODELS}")
    from models.dialects import FALLBACK, detect_dialect

    dialect = detect_dialect(template) if isinstance(template, str) and template else FALLBACK.name
    if dialect == FALLBACK.name:
        calls = ("its chat template has no tool calls: ribbit asks for plain JSON calls, which models not trained "
                 "for them rarely write (it may answer without editing)")
    else:
        calls = f"tool calls in the {dialect} format its chat template teaches"
    return ModelCheck(name=name, ok=True, detail=f"{path}{origin}: {calls}")
MODELS_SHOWN = 30


def endpoint_checks(spec: str) -> list[ModelCheck]:
    """An openai: SPEC: where its key comes from (never the key), whether the server answers, its models."""
    from urllib.parse import urlsplit

    from models.base import ModelError
    from models.openai_backend import OpenAICompatibleModel, api_key_for, parse_spec

    try:
        parsed = parse_spec(spec)
        key = api_key_for(parsed)
    except ModelError as exc:
        return [ModelCheck(name="endpoint", ok=False, detail=str(exc))]
    host = urlsplit(parsed.base_url).hostname or ""
    if key is None:
        key_line = ModelCheck(name="API key", ok=True, detail=f"none ({parsed.key_env} is not set; fine for a server without keys)")
    else:
        clear = parsed.base_url.startswith("http://") and host not in ("127.0.0.1", "localhost", "::1")
        key_line = ModelCheck(name="API key", ok=True, detail=f"from {parsed.key_env}" + (
            "; sent in clear text over http:// to another machine" if clear else ""))
    try:
        client = OpenAICompatibleModel(parsed.base_url, parsed.model or "-", api_key=key,
                                       timeout_s=min(parsed.timeout_s, 30.0), retries=min(parsed.retries, 2), probe=False)
        models = client.list_models()
    except ModelError as exc:
        return [ModelCheck(name="endpoint", ok=False, detail=str(exc)), key_line]
    shown = ", ".join(models[:MODELS_SHOWN]) + (f" and {len(models) - MODELS_SHOWN} more" if len(models) > MODELS_SHOWN else "")
    checks = [ModelCheck(name="endpoint", ok=True, detail=f"{parsed.base_url} answers; {len(models)} models: {shown or '(none)'}"),
              key_line]
    if parsed.model is None:
        checks.append(ModelCheck(name="served model", ok=bool(models),
                                 detail=f"{models[0]} (the first listed; name one with #MODEL)" if models
                                 else "the server lists no models; name one: openai:URL#MODEL"))
    elif parsed.model in models:
        checks.append(ModelCheck(name="served model", ok=True, detail=f"{parsed.model} is listed"))
    else:
        checks.append(ModelCheck(name="served model", ok=False, detail=f"{parsed.model} is not among the models the server lists"))
    return checks


def threads_check(window: float = 0.5) -> ModelCheck:
    """The thread choice and why: cores, --threads / RIBBIT_THREADS, and contention measured now."""
    import time

    from models.base import ModelError
    from models.spec import engine_options
    from models.threads import ContentionMeter, ThreadPolicy

    try:
        policy = ThreadPolicy(flag=engine_options().threads)
    except ModelError as exc:
        return ModelCheck(name="threads", ok=False, detail=str(exc))
    meter = ContentionMeter()
    meter.start()
    time.sleep(window)
    choice = policy.observe(meter.stop())
    return ModelCheck(name="threads", ok=True, detail=choice.reason())


def drafting_check(spec: str) -> ModelCheck:
    """Which draft sources speculative decoding would use for the configured GGUF."""
    from pathlib import Path

    from models.base import ModelError
    from models.embedded import embedded_model_path
    from models.gguf_meta import read_metadata
    from models.llama_backend import has_mtp_layer
    from models.spec import DEFAULT_SPECS, engine_options

    mode = engine_options().draft
    if spec.startswith(("openai:", "replay:")):
        return ModelCheck(name="drafting", ok=True, detail=f"not used by {spec.split(':', 1)[0]}: models")
    if mode == "none":
        return ModelCheck(name="drafting", ok=True, detail="off (--draft none)")
    try:
        path = embedded_model_path() if spec in DEFAULT_SPECS else Path(spec).expanduser()
        mtp = has_mtp_layer(read_metadata(path)) if path.is_file() else False
    except ModelError as exc:
        return ModelCheck(name="drafting", ok=False, detail=str(exc))
    sources = []
    if mode in ("lookup", "auto"):
        sources.append("prompt lookup")
    if mode in ("mtp", "auto"):
        sources.append("the model's MTP head" if mtp else "no MTP head in this GGUF")
    return ModelCheck(name="drafting", ok=True, detail=f"--draft {mode}: " + ", ".join(sources))


def memory_check(spec: str) -> ModelCheck:
    """The memory planner's choice for the configured GGUF (context, KV type, batch, threads), or why it won't fit."""
    from models.base import ModelError

    if spec.startswith(("openai:", "replay:")):
        return ModelCheck(name="memory plan", ok=True, detail=f"not needed for {spec.split(':', 1)[0]}: models")
    try:
        plan = _plan(spec)
        if isinstance(plan, str):
            return ModelCheck(name="memory plan", ok=False, detail=plan)
        return ModelCheck(name="memory plan", ok=True, detail=plan.describe())
    except ModelError as exc:
        return ModelCheck(name="memory plan", ok=False, detail=str(exc))


def planned_memory_bytes(spec: str) -> int:
    """What the model of a SPEC would keep resident in ribbit (0: none in-process, or unknown)."""
    from models.base import ModelError

    if spec.startswith(("openai:", "replay:")):
        return 0
    try:
        plan = _plan(spec)
    except ModelError:
        return 0
    return 0 if isinstance(plan, str) else plan.total_bytes


def _plan(spec: str):  # type: ignore[no-untyped-def]
    """The memory plan for a GGUF SPEC at the largest context, or why there is none (a line)."""
    from pathlib import Path

    from models.drafting import MAX_DRAFT
    from models.embedded import embedded_model_path
    from models.gguf_meta import read_metadata
    from models.memory import model_shape, plan_memory
    from models.spec import DEFAULT_SPECS, engine_options
    from models.threads import ThreadPolicy

    path = embedded_model_path() if spec in DEFAULT_SPECS else Path(spec).expanduser()
    if not path.is_file():
        return f"{path} does not exist"
    options = engine_options()
    threads = ThreadPolicy(flag=options.threads).choice
    meta = read_metadata(path)
    # As the backend loads it: drafting on a recurrent model keeps rollback snapshots (models.llama_backend).
    rollback = MAX_DRAFT if options.draft != "none" and model_shape(meta).recurrent_layers else 0
    return plan_memory(path, 131_072, threads=threads, rollback_tokens=rollback, meta=meta)
