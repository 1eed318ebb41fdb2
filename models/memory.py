"""Memory planner: context length, KV cache type, batch size and threads from free RAM and cores.

Everything is estimated from the GGUF header (no tensors are read): the model file is mapped whole,
the KV cache grows with the context (only the attention layers of a hybrid model have one), a hybrid
or recurrent model adds a fixed recurrent state (times 1 + the rollback snapshots speculative decoding
keeps), and llama.cpp needs a compute buffer per batch. When the model cannot fit even with a small
context the planner refuses with the numbers. Threads come from models.threads (cores, measured
contention, --threads / RIBBIT_THREADS).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from models.base import ModelError
from models.gguf_meta import read_metadata, trained_context
from models.threads import ThreadChoice, ThreadPolicy

KvType = Literal["f16", "q8_0"]
GGML_TYPES = {"f16": 1, "q8_0": 8}
BYTES_PER_ELEMENT = {"f16": 2.0, "q8_0": 34 / 32}
MIN_CONTEXT = 2048
# The context allocated at the start, before the conversation asks for more (models.llama_runtime
# grows it). Chosen by measurement (docs/performance.md): ribbit's system prompt, a short task and a turn
# fit, and at FrogNano's size it is 128 MiB of f16 cache where the whole 131,072 would be 4 GiB.
START_CONTEXT = 4096
GROW_STEP = 1024
HEADROOM = 512 << 20  # the OS, Python, ribbit itself
# Measured (bench.engine section 9, README). Small caches (up to this): f16 without flash attention
# (SmolLM2: prefill 1.33x, decode 1.06x vs q8_0 + FA). Larger ones: f16 with flash attention, since
# without FA llama.cpp's score buffer grows with the context; at FrogNano's size, 4,096 tokens deep, it
# reads prompts 1.50x faster than q8_0 + FA at equal decode speed (llama.cpp's CPU kernel tiles f16/f32
# KV only; a q8_0 cache takes the row-by-row path, which slows with depth). Deeper, 6-10K, its decode
# is slower (0.84x over bench.session's first 7 steps) but the task is still 1.44x faster, prompts
# outweighing decodes there. q8_0 + FA halves the cache where memory is short.
FA_ABOVE = 256 << 20
# The f16 cache's extra memory is spent only where the whole plan takes at most this share of free RAM.
F16_SHARE = 0.5
GiB = float(1 << 30)


class MemoryPlan(BaseModel):
    n_ctx: int  # the largest context: what the conversation may grow to (compaction triggers there)
    # The context allocated at the start (None: all of n_ctx); it grows as the conversation needs
    # (models.llama_runtime.LlamaRuntime.resize), never re-reading a token.
    start_ctx: int | None = None
    kv_type: KvType = "f16"
    flash_attn: bool = False
    n_batch: int = 256
    n_threads: int = 1
    threads: ThreadChoice | None = None  # why n_threads is what it is
    # Recurrent-state snapshots kept for rolling back rejected drafts (llama.cpp's n_rs_seq).
    rollback_tokens: int = 0
    model_bytes: int = 0
    kv_bytes: int = 0
    recurrent_bytes: int = 0
    compute_bytes: int = 0
    free_bytes: int | None = None
    notes: list[str] = []

    @property
    def total_bytes(self) -> int:
        """At the largest context."""
        return self.model_bytes + self.kv_bytes + self.recurrent_bytes + self.compute_bytes

    @property
    def initial_ctx(self) -> int:
        return min(self.n_ctx, self.start_ctx or self.n_ctx)

    def kv_bytes_at(self, n_ctx: int) -> int:
        return self.kv_bytes * n_ctx // max(1, self.n_ctx)

    def bytes_at(self, n_ctx: int) -> int:
        """What the plan needs with `n_ctx` allocated (the compute buffer taken at its largest)."""
        return self.model_bytes + self.kv_bytes_at(n_ctx) + self.recurrent_bytes + self.compute_bytes

    @property
    def type_kv(self) -> int:
        return GGML_TYPES[self.kv_type]

    def describe(self) -> str:
        free = f" of {self.free_bytes / GiB:.1f} GiB free" if self.free_bytes is not None else ""
        start = self.initial_ctx
        grows = start < self.n_ctx
        parts = [
            f"context {start} (grows to {self.n_ctx})" if grows else f"context {self.n_ctx}",
            f"KV {self.kv_type}" + (" + flash attention" if self.flash_attn else ""),
            f"batch {self.n_batch}",
            self.threads.reason() if self.threads is not None else f"{self.n_threads} threads",
            (f"needs ~{self.bytes_at(start) / GiB:.2f} GiB at the start, ~{self.total_bytes / GiB:.2f} GiB at {self.n_ctx}{free} "
             if grows else f"needs ~{self.total_bytes / GiB:.2f} GiB{free} ")
            + f"(model {self.model_bytes / GiB:.2f}, KV "
            + (f"{self.kv_bytes_at(start) / GiB:.2f}-{self.kv_bytes / GiB:.2f}" if grows else f"{self.kv_bytes / GiB:.2f}") + ", "
            + f"recurrent {self.recurrent_bytes / GiB:.2f}"
            + (f" with {self.rollback_tokens} rollback snapshots" if self.rollback_tokens else "")
            + f", compute {self.compute_bytes / GiB:.2f})",
        ]
        return ", ".join(parts) + "".join(f"; {n}" for n in self.notes)


def grown_context(allocated: int, needed: int, largest: int) -> int:
    """The context to grow to when `needed` tokens no longer fit `allocated`: at least half again as large
    (a long conversation grows a few times, each growth copying its state once), in steps of GROW_STEP,
    at most `largest`."""
    target = max(needed, allocated + allocated // 2)
    return min(largest, -(-target // GROW_STEP) * GROW_STEP)


def available_memory() -> int | None:
    """Bytes the kernel says can be allocated without swapping (MemAvailable), if known."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class ModelShape(BaseModel):
    """What the planner needs to know about a model, from its GGUF header."""

    n_layers: int
    attention_layers: int
    n_head: int
    n_head_kv: int
    key_dim: int
    value_dim: int
    n_embd: int
    n_ff: int
    n_vocab: int
    recurrent_layers: int = 0
    recurrent_state_bytes: int = 0  # one sequence, all recurrent layers
    trained_context: int | None = None

    def kv_bytes_per_token(self, kv_type: KvType) -> float:
        return self.attention_layers * self.n_head_kv * (self.key_dim + self.value_dim) * BYTES_PER_ELEMENT[kv_type]


def _int(meta: dict[str, Any], key: str, default: int = 0) -> int:
    value = meta.get(key, default)
    if isinstance(value, list):  # per-layer arrays (some archs): take the largest
        value = max((v for v in value if isinstance(v, int)), default=default)
    return int(value) if isinstance(value, (int, float)) else default


def model_shape(meta: dict[str, Any]) -> ModelShape:
    arch = meta.get("general.architecture", "llama")
    n_layers = _int(meta, f"{arch}.block_count", 1)
    n_embd = _int(meta, f"{arch}.embedding_length", 1)
    n_head = _int(meta, f"{arch}.attention.head_count", 1) or 1
    n_head_kv = _int(meta, f"{arch}.attention.head_count_kv", n_head) or n_head
    head_dim = n_embd // n_head
    key_dim = _int(meta, f"{arch}.attention.key_length", head_dim) or head_dim
    value_dim = _int(meta, f"{arch}.attention.value_length", head_dim) or head_dim
    vocab = meta.get("tokenizer.ggml.tokens")
    n_vocab = _int(meta, f"{arch}.vocab_size") or (vocab.get("array_length", 0) if isinstance(vocab, dict) else len(vocab or []))
    recurrent = meta.get(f"{arch}.attention.recurrent_layers")
    interval = _int(meta, f"{arch}.full_attention_interval")
    if isinstance(recurrent, list):
        rec_layers = sum(1 for r in recurrent if r)
    elif interval:
        rec_layers = n_layers - n_layers // interval
    else:
        rec_layers = n_layers if meta.get(f"{arch}.ssm.state_size") else 0
    state_bytes = 0
    if rec_layers:
        inner = _int(meta, f"{arch}.ssm.inner_size")
        state = _int(meta, f"{arch}.ssm.state_size")
        groups = _int(meta, f"{arch}.ssm.group_count", 1) or 1
        kernel = _int(meta, f"{arch}.ssm.conv_kernel", 4)
        per_layer = 4 * (inner * state + (kernel - 1) * (inner + 2 * groups * state))
        state_bytes = rec_layers * per_layer
    return ModelShape(
        n_layers=n_layers, attention_layers=n_layers - rec_layers, n_head=n_head, n_head_kv=n_head_kv,
        key_dim=key_dim, value_dim=value_dim, n_embd=n_embd, n_ff=_int(meta, f"{arch}.feed_forward_length", 4 * n_embd),
        n_vocab=max(1, n_vocab), recurrent_layers=rec_layers, recurrent_state_bytes=state_bytes,
        trained_context=trained_context(meta),
    )


def compute_bytes(shape: ModelShape, n_ctx: int, n_batch: int, flash_attn: bool) -> int:
    """llama.cpp's compute buffer, roughly: logits, FFN activations and (without flash attention) scores."""
    logits = n_batch * shape.n_vocab * 4
    activations = n_batch * (4 * shape.n_embd + 3 * shape.n_ff) * 4
    scores = 0 if flash_attn else n_batch * n_ctx * shape.n_head * 4
    return int(64 * (1 << 20) + logits + activations + scores)


def plan_memory(
    path: Path,
    wanted_context: int,
    *,
    free: int | None = None,
    cores: int | None = None,
    threads: ThreadChoice | None = None,
    rollback_tokens: int = 0,
    meta: dict[str, Any] | None = None,
    min_context: int = MIN_CONTEXT,
    headroom: int = HEADROOM,
    start_context: int | None = None,
) -> MemoryPlan:
    """The settings to load `path` with; ModelError when it cannot fit in `free` bytes. The plan's n_ctx is
    the largest context that fits; `start_context` is what is allocated first (the context grows to n_ctx)."""
    meta = meta if meta is not None else read_metadata(path)
    start_context = START_CONTEXT if start_context is None else start_context
    shape = model_shape(meta)
    free = available_memory() if free is None else free
    if threads is None:
        threads = ThreadPolicy(cores=cores).choice if cores else ThreadPolicy().choice
    cores = threads.cores
    model_bytes = path.stat().st_size if path.is_file() else 0
    ctx = max(256, wanted_context)
    notes: list[str] = []
    if shape.trained_context and ctx > shape.trained_context:
        ctx = shape.trained_context
        notes.append(f"context capped at the trained {ctx}")
    n_batch = 512 if cores > 4 else 256
    rollback = rollback_tokens if shape.recurrent_layers else 0

    def build(n_ctx: int, kv: KvType, flash: bool, batch: int) -> MemoryPlan:
        return MemoryPlan(
            n_ctx=n_ctx, kv_type=kv, flash_attn=flash, n_batch=batch, n_threads=threads.n_threads, threads=threads,
            rollback_tokens=rollback, model_bytes=model_bytes,
            kv_bytes=int(shape.kv_bytes_per_token(kv) * n_ctx), recurrent_bytes=shape.recurrent_state_bytes * (1 + rollback),
            compute_bytes=compute_bytes(shape, n_ctx, batch, flash), free_bytes=free, notes=list(notes),
        )

    plan = build(ctx, "f16", False, n_batch)
    if plan.kv_bytes > FA_ABOVE:
        plan = build(ctx, "f16", True, n_batch)
    if free is not None and plan.total_bytes + headroom > free * (F16_SHARE if plan.flash_attn else 1.0):
        notes.append(f"KV q8_0: with an f16 cache the plan for {ctx} tokens would need {plan.total_bytes / GiB:.1f} GiB, "
                     f"over {'half ' if plan.flash_attn else ''}the free memory")
        plan = build(ctx, "q8_0", True, n_batch)
    if free is None:
        plan.start_ctx = min(plan.n_ctx, start_context)
        return plan
    budget = free - headroom
    while plan.total_bytes > budget and plan.n_ctx > min_context:
        smaller = max(min_context, plan.n_ctx // 2)
        plan = build(smaller, plan.kv_type, plan.flash_attn, plan.n_batch)
    if plan.total_bytes <= budget and plan.n_ctx < ctx:  # halving overshot: take back what fits, 1,024 at a time
        low, high = plan.n_ctx // 1024, min(ctx, 2 * plan.n_ctx) // 1024
        while low < high:
            middle = (low + high + 1) // 2
            if build(middle * 1024, plan.kv_type, plan.flash_attn, plan.n_batch).total_bytes <= budget:
                low = middle
            else:
                high = middle - 1
        plan = build(low * 1024, plan.kv_type, plan.flash_attn, plan.n_batch)
    if plan.total_bytes > budget and plan.n_batch > 64:
        plan = build(plan.n_ctx, plan.kv_type, plan.flash_attn, 64)
    if plan.total_bytes > budget:
        raise ModelError(
            f"{path.name} cannot fit in memory: it needs about {plan.total_bytes / GiB:.1f} GiB "
            f"(model {model_bytes / GiB:.1f} GiB + KV cache and buffers for {plan.n_ctx} tokens) "
            f"but only {free / GiB:.1f} GiB is free; close other programs or use a smaller quantisation"
        )
    if plan.n_ctx < ctx:
        plan.notes.append(f"largest context reduced from {ctx} to {plan.n_ctx} to fit free RAM")
    plan.start_ctx = min(plan.n_ctx, start_context)
    return plan
