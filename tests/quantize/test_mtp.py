"""The converter writes Qwen3.5's MTP layer so that llama.cpp's MTP head computes what the checkpoint means.

Checked on the tiny checkpoint: llama.cpp's MTP context (LLAMA_CONTEXT_TYPE_MTP) run on one token at
position 0 — where attention over a single token is just its value vector, so rotary embeddings and
q/k norms drop out — against the same block computed in numpy from the safetensors, with Hugging Face's
conventions (RMSNorm times 1 + w, the output gate packed per head after q, GQA, tied embeddings).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from models.llama_runtime import LlamaRuntime


def _tensors(folder) -> dict[str, np.ndarray]:
    import torch
    from safetensors.torch import load_file

    out: dict[str, np.ndarray] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        out.update({k: v.to(torch.float32).numpy() for k, v in load_file(str(shard)).items()})
    return out


def _rms(x: np.ndarray, w: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x) + eps) * (1.0 + w)


def reference_mtp_logits(t: dict[str, np.ndarray], token: int, hidden: np.ndarray, n_head: int, n_kv: int, head_dim: int) -> np.ndarray:
    m = "mtp.layers.0."
    embed = t["model.embed_tokens.weight"]
    x = t["mtp.fc.weight"] @ np.concatenate([_rms(embed[token], t["mtp.pre_fc_norm_embedding.weight"]),
                                              _rms(hidden, t["mtp.pre_fc_norm_hidden.weight"])])
    a = _rms(x, t[f"{m}input_layernorm.weight"])
    q_full = (t[f"{m}self_attn.q_proj.weight"] @ a).reshape(n_head, 2 * head_dim)
    gate = q_full[:, head_dim:]
    v = (t[f"{m}self_attn.v_proj.weight"] @ a).reshape(n_kv, head_dim)
    per_kv = n_head // n_kv
    attended = np.stack([v[h // per_kv] for h in range(n_head)])  # softmax over one token is 1
    out = (attended / (1.0 + np.exp(-gate))).reshape(-1)
    x2 = x + t[f"{m}self_attn.o_proj.weight"] @ out
    mlp_in = _rms(x2, t[f"{m}post_attention_layernorm.weight"])
    g = t[f"{m}mlp.gate_proj.weight"] @ mlp_in
    up = t[f"{m}mlp.up_proj.weight"] @ mlp_in
    x3 = x2 + t[f"{m}mlp.down_proj.weight"] @ (g / (1.0 + np.exp(-g)) * up)
    return embed @ _rms(x3, t["mtp.norm.weight"])


def test_mtp_head_matches_the_checkpoint(checkpoints: Callable, converted: Callable) -> None:
    tensors = _tensors(checkpoints("qwen35"))
    runtime = LlamaRuntime(converted("qwen35", "f32"), n_ctx=256, n_batch=32, n_threads=1, load_mtp=True)
    try:
        assert runtime.n_layer_nextn == 1
        mtp = runtime.open_mtp(n_threads=1, type_kv=0, flash_attn=False)  # f32 cache: no rounding
        rng = np.random.default_rng(3)
        for token in (5, 77, 301):
            hidden = rng.standard_normal(64).astype(np.float32)
            mtp.clear()
            mtp._run([token], [hidden], 0, outputs=True)  # noqa: SLF001
            ours = np.ctypeslib.as_array(runtime._llama_cpp.llama_get_logits_ith(mtp.ctx, 0), shape=(runtime.n_vocab(),))  # noqa: SLF001
            ref = reference_mtp_logits(tensors, token, hidden, n_head=4, n_kv=2, head_dim=32)
            assert ours.shape == ref.shape
            np.testing.assert_allclose(ours, ref, rtol=2e-3, atol=2e-3)
            assert int(ours.argmax()) == int(ref.argmax())
    finally:
        runtime.close()


def test_no_mtp_gguf_has_no_head(checkpoints: Callable, tmp_path) -> None:
    from quantize.convert import convert_checkpoint

    out = convert_checkpoint(checkpoints("qwen35"), tmp_path / "nomtp.gguf", keep_mtp=False).path
    runtime = LlamaRuntime(out, n_ctx=128, n_batch=16, n_threads=1, load_mtp=True)
    try:
        assert runtime.n_layer_nextn == 0
    finally:
        runtime.close()


def test_mtp_names_nested_under_model_are_found() -> None:
    from quantize.archs import normalise_name

    assert normalise_name("model.mtp.fc.weight") == "mtp.fc.weight"
    assert normalise_name("mtp.layers.0.mlp.up_proj.weight") == "mtp.layers.0.mlp.up_proj.weight"
