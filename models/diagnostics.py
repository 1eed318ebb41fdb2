"""`ribbit doctor` lines about models: llama.cpp, the embedded default, the configured SPEC."""

from __future__ import annotations


from models.backends import EngineOptions, backend_for, gguf_path, resolve_spec
from models.base import ModelCheck, ModelError
from models.settings import Settings, env_name


def model_checks(spec: str | None = None, engine: EngineOptions | None = None) -> list[ModelCheck]:
    """The lines for `ribbit doctor [--model SPEC]`; `engine`: the command line's engine options."""
    from models.embedded import DEMO_LIMITS, EMBEDDED_NAME, embedded_model

    engine = engine or EngineOptions()

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
    origin = f" (from {env_name('model')})" if not spec and Settings.read().model else ""
    backend = backend_for(chosen)
    checks.append(backend.spec_check(chosen, origin))
    checks.append(threads_check(engine))
    checks.append(memory_check(chosen, engine))
    checks.append(drafting_check(chosen, engine))
    checks += backend.checks(chosen)
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


# The lines whose `!!` makes `ribbit doctor` exit 1: ribbit cannot work as configured without them.
NEEDED = ("llama.cpp", "embedded model", "model SPEC", "endpoint", "API key", "served model")


def threads_check(engine: EngineOptions, window: float = 0.5) -> ModelCheck:
    """The thread choice and why: cores, --threads / RIBBIT_THREADS, and contention measured now."""
    import time

    from models.threads import ContentionMeter, ThreadPolicy

    try:
        policy = ThreadPolicy(flag=engine.threads)
    except ModelError as exc:
        return ModelCheck(name="threads", ok=False, detail=str(exc))
    meter = ContentionMeter()
    meter.start()
    time.sleep(window)
    choice = policy.observe(meter.stop())
    return ModelCheck(name="threads", ok=True, detail=choice.reason())


def drafting_check(spec: str, engine: EngineOptions) -> ModelCheck:
    """Which draft sources speculative decoding would use for the configured GGUF."""
    from models.gguf_meta import read_metadata
    from models.llama_backend import has_mtp_layer

    mode = engine.draft
    if not backend_for(spec).in_process:
        return ModelCheck(name="drafting", ok=True, detail=f"not used by {spec.split(':', 1)[0]}: models")
    if mode == "none":
        return ModelCheck(name="drafting", ok=True, detail="off (--draft none)")
    try:
        path = gguf_path(spec)
        mtp = has_mtp_layer(read_metadata(path)) if path.is_file() else False
    except ModelError as exc:
        return ModelCheck(name="drafting", ok=False, detail=str(exc))
    sources = []
    if mode in ("lookup", "auto"):
        sources.append("prompt lookup")
    if mode in ("mtp", "auto"):
        sources.append("the model's MTP head" if mtp else "no MTP head in this GGUF")
    return ModelCheck(name="drafting", ok=True, detail=f"--draft {mode}: " + ", ".join(sources))


def memory_check(spec: str, engine: EngineOptions) -> ModelCheck:
    """The memory planner's choice for the configured GGUF (context, KV type, batch, threads), or why it won't fit."""
    if not backend_for(spec).in_process:
        return ModelCheck(name="memory plan", ok=True, detail=f"not needed for {spec.split(':', 1)[0]}: models")
    try:
        plan = _plan(spec, engine)
        if isinstance(plan, str):
            return ModelCheck(name="memory plan", ok=False, detail=plan)
        return ModelCheck(name="memory plan", ok=True, detail=plan.describe())
    except ModelError as exc:
        return ModelCheck(name="memory plan", ok=False, detail=str(exc))


def planned_memory_bytes(spec: str, engine: EngineOptions | None = None) -> int:
    """What the model of a SPEC would keep resident in ribbit (0: none in-process, or unknown)."""
    if not backend_for(spec).in_process:
        return 0
    try:
        plan = _plan(spec, engine or EngineOptions())
    except ModelError:
        return 0
    return 0 if isinstance(plan, str) else plan.total_bytes


def _plan(spec: str, options: EngineOptions):  # type: ignore[no-untyped-def]
    """The memory plan for a GGUF SPEC at the largest context, or why there is none (a line)."""
    from models.drafting import MAX_DRAFT
    from models.gguf_meta import read_metadata
    from models.memory import model_shape, plan_memory
    from models.threads import ThreadPolicy

    path = gguf_path(spec)
    if not path.is_file():
        return f"{path} does not exist"
    threads = ThreadPolicy(flag=options.threads).choice
    meta = read_metadata(path)
    # As the backend loads it: drafting on a recurrent model keeps rollback snapshots (models.llama_backend).
    rollback = MAX_DRAFT if options.draft != "none" and model_shape(meta).recurrent_layers else 0
    return plan_memory(path, 131_072, threads=threads, rollback_tokens=rollback, meta=meta)
