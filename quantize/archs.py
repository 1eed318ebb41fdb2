"""Per-architecture tensor plans: which checkpoint tensor becomes which GGUF tensor, the shape
config.json implies for it, and the exact transformation llama.cpp's loader expects.

A plan is built before a byte is written, so a checkpoint whose tensors disagree with its
config.json is refused up front, naming the tensor and its file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from gguf import MODEL_ARCH, GGUFWriter, get_tensor_name_map

from quantize.config import Arch, CheckpointConfig, TextConfig
from quantize.errors import QuantizeError
from quantize.safetensors_source import TensorEntry

Transform = Callable[[np.ndarray], np.ndarray]

_GGUF_ARCH = {Arch.QWEN35: MODEL_ARCH.QWEN35, Arch.QWEN3: MODEL_ARCH.QWEN3, Arch.LLAMA: MODEL_ARCH.LLAMA}
# Checkpoint prefixes that belong to the (unsupported, never post-trained) vision tower.
_VISION_PREFIXES = ("model.visual.", "visual.", "model.vision_tower.", "vision_tower.", "model.vision_model.")


@dataclass(frozen=True)
class TensorJob:
    src: str  # checkpoint tensor name
    dst: str  # GGUF tensor name
    shape: tuple[int, ...]  # the shape config.json implies, in HF (row-major) order
    f32: bool = False  # written as F32: norms, 1-D parameters, conv kernels
    transform: Transform | None = None  # on raw bits for permutations, on float32 for arithmetic
    out_shape: tuple[int, ...] | None = None  # when the transform changes the shape

    @property
    def final_shape(self) -> tuple[int, ...]:
        return self.out_shape or self.shape


@dataclass
class Plan:
    arch: Arch
    block_count: int
    jobs: list[TensorJob]
    n_mtp: int = 0
    skipped: list[str] = field(default_factory=list)


# --- transformations -------------------------------------------------------------------------

def add_one(x: np.ndarray) -> np.ndarray:
    # Qwen3.5's RMSNorm computes x * (1 + w); llama.cpp multiplies by the stored weight
    return x + np.float32(1.0)


def neg_exp(x: np.ndarray) -> np.ndarray:
    # llama.cpp's ssm_a holds A itself, the checkpoint holds log(-A)
    return -np.exp(x)


def reorder_v_heads(x: np.ndarray, axis: int, n_k: int, per_k: int, head: int) -> np.ndarray:
    """V heads from grouped-by-K order [k0v0 k0v1 .. k1v0 ..] to tiled [k0v0 k1v0 .. k0v1 ..],
    the order ggml's broadcasting repeat of the K heads produces."""
    x = np.moveaxis(x, axis, 0)
    rest = x.shape[1:]
    x = x.reshape(n_k, per_k, head, *rest).swapaxes(0, 1).reshape(n_k * per_k * head, *rest)
    return np.ascontiguousarray(np.moveaxis(x, 0, axis))


def reorder_tail_rows(x: np.ndarray, start: int, n_k: int, per_k: int, head: int) -> np.ndarray:
    """Reorder only rows[start:] (the V part of a fused q|k|v tensor)."""
    return np.concatenate([x[:start], reorder_v_heads(x[start:], 0, n_k, per_k, head)], axis=0)


def undo_hf_rope_permute(x: np.ndarray, n_head: int) -> np.ndarray:
    """HF Llama stores q/k rows rotate-half ordered; llama.cpp's llama rope wants them paired."""
    return np.ascontiguousarray(
        x.reshape(n_head, 2, x.shape[0] // n_head // 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)
    )


def _chain(*fs: Transform) -> Transform:
    def run(x: np.ndarray) -> np.ndarray:
        for f in fs:
            x = f(x)
        return x

    return run


# --- name handling ---------------------------------------------------------------------------

def normalise_name(name: str) -> str | None:
    """The checkpoint name in flat CausalLM spelling, or None for tensors that are not converted."""
    if name.startswith(_VISION_PREFIXES):
        return None
    if name.startswith("model.language_model."):
        return "model." + name.removeprefix("model.language_model.")
    if name.startswith("model.mtp."):  # some exports nest the MTP block under model.
        return name.removeprefix("model.")
    if name.startswith("language_model."):
        return name.removeprefix("language_model.")
    return name


class _Namer:
    def __init__(self, arch: Arch, block_count: int) -> None:
        self.map = get_tensor_name_map(_GGUF_ARCH[arch], block_count)

    def __call__(self, hf_name: str) -> str:
        name = self.map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise AssertionError(f"no GGUF name for {hf_name}")  # a bug in this module, not input
        return name


# --- metadata --------------------------------------------------------------------------------

def write_common_metadata(w: GGUFWriter, t: TextConfig, block_count: int) -> None:
    w.add_block_count(block_count)
    w.add_context_length(t.max_position_embeddings)
    w.add_embedding_length(t.hidden_size)
    w.add_feed_forward_length(t.intermediate_size)
    w.add_head_count(t.num_attention_heads)
    w.add_head_count_kv(t.n_kv_heads)
    w.add_layer_norm_rms_eps(t.rms_norm_eps)
    w.add_key_length(t.head_size)
    w.add_value_length(t.head_size)
    theta = t.rope.get("rope_theta")
    if theta is not None:
        w.add_rope_freq_base(float(theta))


def _rope_scaling(w: GGUFWriter, t: TextConfig) -> None:
    from gguf import RopeScalingType

    kind = t.rope.get("rope_type") or t.rope.get("type") or "default"
    if kind == "default":
        return
    if kind == "linear" and t.rope.get("factor"):
        w.add_rope_scaling_type(RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(t.rope["factor"]))
        return
    raise QuantizeError(f"rope scaling type {kind!r} is not supported (default, linear)", "config.json")


# --- plans -----------------------------------------------------------------------------------

def _mlp_jobs(j: list[TensorJob], name: _Namer, p: str, t: TextConfig) -> None:
    h, f = t.hidden_size, t.intermediate_size
    for proj, shape in (("gate_proj", (f, h)), ("up_proj", (f, h)), ("down_proj", (h, f))):
        j.append(TensorJob(f"{p}mlp.{proj}.weight", name(f"{p}mlp.{proj}.weight"), shape))


def _attention_jobs(
    j: list[TensorJob], name: _Namer, p: str, t: TextConfig, *, gated_q: bool, qk_norm: bool,
    norm_fix: Transform | None = None, q_fix: Transform | None = None, k_fix: Transform | None = None,
    hf: str | None = None,
) -> None:
    """Full attention. ``p`` is the checkpoint prefix, ``hf`` the flat prefix used for naming."""
    hf = hf or p
    h, hd, nh, nkv = t.hidden_size, t.head_size, t.num_attention_heads, t.n_kv_heads
    q_rows = nh * hd * (2 if gated_q else 1)  # Qwen3.5 packs the output gate with q
    j.append(TensorJob(f"{p}self_attn.q_proj.weight", name(f"{hf}self_attn.q_proj.weight"), (q_rows, h), transform=q_fix))
    j.append(TensorJob(f"{p}self_attn.k_proj.weight", name(f"{hf}self_attn.k_proj.weight"), (nkv * hd, h), transform=k_fix))
    j.append(TensorJob(f"{p}self_attn.v_proj.weight", name(f"{hf}self_attn.v_proj.weight"), (nkv * hd, h)))
    j.append(TensorJob(f"{p}self_attn.o_proj.weight", name(f"{hf}self_attn.o_proj.weight"), (h, nh * hd)))
    if qk_norm:
        for n in ("q_norm", "k_norm"):
            j.append(TensorJob(f"{p}self_attn.{n}.weight", name(f"{hf}self_attn.{n}.weight"), (hd,), True, norm_fix))


def _dense_plan(cfg: CheckpointConfig, entries: dict[str, TensorEntry]) -> Plan:
    """qwen3 and llama: plain decoder blocks."""
    t, arch = cfg.text, cfg.arch
    if t.attention_bias or t.mlp_bias:
        raise QuantizeError("attention_bias / mlp_bias checkpoints are not supported", "config.json")
    L, h = t.num_hidden_layers, t.hidden_size
    name = _Namer(arch, L)
    j: list[TensorJob] = [TensorJob("model.embed_tokens.weight", "token_embd.weight", (t.vocab_size, h))]
    for i in range(L):
        p = f"model.layers.{i}."
        j.append(TensorJob(f"{p}input_layernorm.weight", name(f"{p}input_layernorm.weight"), (h,), True))
        j.append(TensorJob(f"{p}post_attention_layernorm.weight", name(f"{p}post_attention_layernorm.weight"), (h,), True))
        if arch is Arch.LLAMA:
            nh, nkv = t.num_attention_heads, t.n_kv_heads
            _attention_jobs(j, name, p, t, gated_q=False, qk_norm=False,
                            q_fix=lambda x, n=nh: undo_hf_rope_permute(x, n),  # type: ignore[misc]
                            k_fix=lambda x, n=nkv: undo_hf_rope_permute(x, n))  # type: ignore[misc]
        else:
            _attention_jobs(j, name, p, t, gated_q=False, qk_norm=True)
        _mlp_jobs(j, name, p, t)
    j.append(TensorJob("model.norm.weight", "output_norm.weight", (h,), True))
    _output_job(j, cfg, entries)
    return Plan(arch, L, j)


def _output_job(j: list[TensorJob], cfg: CheckpointConfig, entries: dict[str, TensorEntry]) -> None:
    t = cfg.text
    if cfg.tie_word_embeddings:
        return  # llama.cpp reuses token_embd when output.weight is absent
    if "lm_head.weight" not in entries:
        raise QuantizeError(
            "tie_word_embeddings is false but the checkpoint has no lm_head.weight", "config.json"
        )
    j.append(TensorJob("lm_head.weight", "output.weight", (t.vocab_size, t.hidden_size)))


def qwen35_layer_is_linear(t: TextConfig) -> list[bool]:
    if t.layer_types is not None:
        if len(t.layer_types) != t.num_hidden_layers:
            raise QuantizeError(
                f"layer_types has {len(t.layer_types)} entries, num_hidden_layers is {t.num_hidden_layers}",
                "config.json",
            )
        return [k == "linear_attention" for k in t.layer_types]
    interval = t.full_attention_interval or 4
    return [(i + 1) % interval != 0 for i in range(t.num_hidden_layers)]


def _qwen35_plan(cfg: CheckpointConfig, entries: dict[str, TensorEntry], keep_mtp: bool) -> Plan:
    t = cfg.text
    need = ("linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
            "linear_num_key_heads", "linear_num_value_heads")
    missing = [k for k in need if getattr(t, k) is None]
    if missing:
        raise QuantizeError(f"qwen35 needs {', '.join(missing)}", "config.json")
    nk, nv = t.linear_num_key_heads or 0, t.linear_num_value_heads or 0
    dk, dv, kernel = t.linear_key_head_dim or 0, t.linear_value_head_dim or 0, t.linear_conv_kernel_dim or 0
    if dk != dv:
        raise QuantizeError("llama.cpp's qwen35 needs linear_key_head_dim == linear_value_head_dim", "config.json")
    if nv % nk:
        raise QuantizeError("linear_num_value_heads must be a multiple of linear_num_key_heads", "config.json")
    per_k = nv // nk

    has_mtp = any(n.startswith("mtp.") for n in entries)
    n_mtp = t.mtp_num_hidden_layers if (keep_mtp and has_mtp) else 0
    L, h = t.num_hidden_layers, t.hidden_size
    name = _Namer(Arch.QWEN35, L + n_mtp)
    linear = qwen35_layer_is_linear(t)
    conv_dim = 2 * nk * dk + nv * dv

    def v_rows(head: int) -> Transform | None:
        return (lambda x: reorder_v_heads(x, 0, nk, per_k, head)) if per_k > 1 else None

    j: list[TensorJob] = [TensorJob("model.embed_tokens.weight", "token_embd.weight", (t.vocab_size, h))]
    for i in range(L):
        p = f"model.layers.{i}."
        j.append(TensorJob(f"{p}input_layernorm.weight", name(f"{p}input_layernorm.weight"), (h,), True, add_one))
        j.append(TensorJob(f"{p}post_attention_layernorm.weight", name(f"{p}post_attention_layernorm.weight"), (h,), True, add_one))
        if linear[i]:
            a = f"{p}linear_attn."
            qkv_fix = (lambda x: reorder_tail_rows(x, 2 * nk * dk, nk, per_k, dv)) if per_k > 1 else None
            squeeze: Transform = lambda x: x.reshape(x.shape[0], x.shape[-1])  # noqa: E731
            conv_fix = _chain(squeeze, qkv_fix) if qkv_fix else squeeze
            out_fix = (lambda x: reorder_v_heads(x, 1, nk, per_k, dv)) if per_k > 1 else None
            a_fix = _chain(neg_exp, v_rows(1)) if per_k > 1 else neg_exp  # type: ignore[arg-type]
            j += [
                TensorJob(f"{a}in_proj_qkv.weight", name(f"{a}in_proj_qkv.weight"), (conv_dim, h), transform=qkv_fix),
                TensorJob(f"{a}in_proj_z.weight", name(f"{a}in_proj_z.weight"), (nv * dv, h), transform=v_rows(dv)),
                TensorJob(f"{a}in_proj_a.weight", name(f"{a}in_proj_a.weight"), (nv, h), transform=v_rows(1)),
                TensorJob(f"{a}in_proj_b.weight", name(f"{a}in_proj_b.weight"), (nv, h), transform=v_rows(1)),
                TensorJob(f"{a}A_log", name(f"{a}A_log"), (nv,), True, a_fix),
                TensorJob(f"{a}dt_bias", name(f"{a}dt_proj.bias"), (nv,), True, v_rows(1)),
                TensorJob(f"{a}conv1d.weight", name(f"{a}conv1d.weight"), (conv_dim, 1, kernel), True, conv_fix,
                          out_shape=(conv_dim, kernel)),
                TensorJob(f"{a}norm.weight", name(f"{a}norm.weight"), (dv,), True),  # gated norm: no +1
                TensorJob(f"{a}out_proj.weight", name(f"{a}out_proj.weight"), (h, nv * dv), transform=out_fix),
            ]
        else:
            _attention_jobs(j, name, p, t, gated_q=True, qk_norm=True, norm_fix=add_one)
        _mlp_jobs(j, name, p, t)

    for m in range(n_mtp):
        bid = L + m
        p, hf = f"mtp.layers.{m}.", f"model.layers.{bid}."
        j.append(TensorJob(f"{p}input_layernorm.weight", name(f"{hf}input_layernorm.weight"), (h,), True, add_one))
        j.append(TensorJob(f"{p}post_attention_layernorm.weight", name(f"{hf}post_attention_layernorm.weight"), (h,), True, add_one))
        _attention_jobs(j, name, p, t, gated_q=True, qk_norm=True, norm_fix=add_one, hf=hf)
        for proj, shape in (("gate_proj", (t.intermediate_size, h)), ("up_proj", (t.intermediate_size, h)),
                            ("down_proj", (h, t.intermediate_size))):
            j.append(TensorJob(f"{p}mlp.{proj}.weight", name(f"{hf}mlp.{proj}.weight"), shape))
    if n_mtp:
        # the shared MTP head lives on the first MTP block (names from llama-arch.cpp)
        b = f"blk.{L}.nextn."
        j += [
            TensorJob("mtp.fc.weight", f"{b}eh_proj.weight", (h, 2 * h)),
            TensorJob("mtp.pre_fc_norm_embedding.weight", f"{b}enorm.weight", (h,), True, add_one),
            TensorJob("mtp.pre_fc_norm_hidden.weight", f"{b}hnorm.weight", (h,), True, add_one),
            TensorJob("mtp.norm.weight", f"{b}shared_head_norm.weight", (h,), True, add_one),
        ]
    j.append(TensorJob("model.norm.weight", "output_norm.weight", (h,), True, add_one))
    _output_job(j, cfg, entries)
    plan = Plan(Arch.QWEN35, L + n_mtp, j, n_mtp=n_mtp)
    if not keep_mtp or not has_mtp:
        plan.skipped = [n for n in entries if n.startswith("mtp.")]
    return plan


def write_arch_metadata(w: GGUFWriter, cfg: CheckpointConfig, plan: Plan) -> None:
    t = cfg.text
    write_common_metadata(w, t, plan.block_count)
    if cfg.arch is Arch.LLAMA:
        w.add_vocab_size(t.vocab_size)
        w.add_rope_dimension_count(t.head_size)
        _rope_scaling(w, t)
    elif cfg.arch is Arch.QWEN3:
        _rope_scaling(w, t)
    else:
        sections = list(t.rope.get("mrope_section") or [11, 11, 10])
        w.add_rope_dimension_sections((sections + [0, 0, 0, 0])[:4])  # required by the qwen35 loader
        w.add_ssm_conv_kernel(t.linear_conv_kernel_dim or 0)
        w.add_ssm_state_size(t.linear_key_head_dim or 0)
        w.add_ssm_group_count(t.linear_num_key_heads or 0)
        w.add_ssm_time_step_rank(t.linear_num_value_heads or 0)
        w.add_ssm_inner_size((t.linear_value_head_dim or 0) * (t.linear_num_value_heads or 0))
        recurrent = qwen35_layer_is_linear(t) + [False] * plan.n_mtp  # MTP blocks are full attention
        w.add_array(f"{w.arch}.attention.recurrent_layers", recurrent)
        w.add_uint32(f"{w.arch}.full_attention_interval", t.full_attention_interval or 4)
        partial = float(t.rope.get("partial_rotary_factor", 0.25))
        w.add_rope_dimension_count(int(t.head_size * partial))
        if plan.n_mtp:
            w.add_uint32(f"{w.arch}.nextn_predict_layers", plan.n_mtp)


def build_plan(cfg: CheckpointConfig, entries: dict[str, TensorEntry], keep_mtp: bool = True) -> Plan:
    """The checked plan: every expected tensor present with the expected shape, nothing unknown."""
    named: dict[str, TensorEntry] = {}
    vision: list[str] = []
    for raw, entry in entries.items():
        flat = normalise_name(raw)
        if flat is None:
            vision.append(raw)
        else:
            named[flat] = entry
    if cfg.arch is Arch.QWEN35:
        plan = _qwen35_plan(cfg, named, keep_mtp)
    else:
        plan = _dense_plan(cfg, named)
    _check(plan, named, cfg)
    plan.skipped += vision
    # the plan refers to the names as stored in the files
    stored = {normalise_name(raw): raw for raw in entries}
    plan.jobs = [dataclasses.replace(job, src=stored[job.src]) for job in plan.jobs]
    return plan


def _check(plan: Plan, named: dict[str, TensorEntry], cfg: CheckpointConfig) -> None:
    wanted = {job.src for job in plan.jobs}
    for job in plan.jobs:
        entry = named.get(job.src)
        if entry is None:
            raise QuantizeError(
                f"checkpoint has no tensor {job.src!r}, which config.json implies "
                f"({cfg.text.num_hidden_layers} layers, arch {cfg.arch.value})", "config.json",
            )
        if entry.shape != job.shape:
            raise QuantizeError(
                f"tensor {job.src!r} has shape {list(entry.shape)} but config.json implies {list(job.shape)}",
                entry.file,
            )
    skipped = set(plan.skipped)
    extra = sorted(n for n in named if n not in wanted and n not in skipped and not _ignorable(n, cfg))
    if extra:
        raise QuantizeError(
            f"tensor {extra[0]!r} is not part of a {cfg.arch.value} model as config.json describes it"
            + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""),
            named[extra[0]].file,
        )


def _ignorable(name: str, cfg: CheckpointConfig) -> bool:
    # rotary caches some exporters save, and a duplicate lm_head of tied checkpoints
    return name.endswith("rotary_emb.inv_freq") or (name == "lm_head.weight" and cfg.tie_word_embeddings)

