"""What the converter writes: metadata keys and tensors as llama.cpp's qwen35/qwen3/llama loaders read them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

from quantize.archs import reorder_v_heads, undo_hf_rope_permute
from quantize.convert import bf16_bits_to_f32, convert_checkpoint, f32_to_bf16_bits
from models.llama_runtime import open_for_logits as load_llama
from quantize.verify import llama_logits

# the keys llama.cpp's converter writes for Qwen3.5 (cross-checked against a GGUF it made)
QWEN35_KEYS = {
    "general.architecture", "general.type", "general.name", "general.file_type", "general.quantization_version",
    "qwen35.block_count", "qwen35.context_length", "qwen35.embedding_length", "qwen35.feed_forward_length",
    "qwen35.attention.head_count", "qwen35.attention.head_count_kv", "qwen35.rope.dimension_sections",
    "qwen35.rope.freq_base", "qwen35.attention.layer_norm_rms_epsilon", "qwen35.attention.key_length",
    "qwen35.attention.value_length", "qwen35.ssm.conv_kernel", "qwen35.ssm.state_size", "qwen35.ssm.group_count",
    "qwen35.ssm.time_step_rank", "qwen35.ssm.inner_size", "qwen35.attention.recurrent_layers",
    "qwen35.full_attention_interval", "qwen35.rope.dimension_count", "qwen35.nextn_predict_layers",
    "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.chat_template",
}


def _fields(path: Path) -> dict[str, object]:
    r = GGUFReader(path)
    return {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}


def test_qwen35_metadata_keys_and_values(converted: Callable) -> None:
    f = _fields(converted("qwen35"))
    assert set(f) == QWEN35_KEYS
    assert f["qwen35.block_count"] == 5  # 4 layers + 1 MTP
    assert f["qwen35.nextn_predict_layers"] == 1
    assert f["qwen35.attention.recurrent_layers"] == [True, True, True, False, False]
    assert f["qwen35.rope.dimension_sections"] == [2, 1, 1, 0]
    assert f["qwen35.rope.dimension_count"] == 8  # head_dim 32 x partial 0.25
    assert (f["qwen35.ssm.group_count"], f["qwen35.ssm.time_step_rank"]) == (2, 4)
    assert f["tokenizer.ggml.pre"] == "qwen35"
    assert f["tokenizer.ggml.model"] == "gpt2"


def test_qwen35_tensors_shapes_and_types(converted: Callable) -> None:
    tensors = {t.name: t for t in GGUFReader(converted("qwen35")).tensors}
    assert not any("visual" in n for n in tensors)
    assert "output.weight" not in tensors  # tied embeddings
    shapes = {n: t.shape.tolist() for n, t in tensors.items()}
    assert shapes["blk.0.attn_qkv.weight"] == [64, 2 * 2 * 16 + 4 * 16]
    assert shapes["blk.0.ssm_conv1d.weight"] == [4, 128]
    assert shapes["blk.0.ssm_a"] == [4]
    assert shapes["blk.3.attn_q.weight"] == [64, 4 * 32 * 2]
    assert shapes["blk.4.nextn.eh_proj.weight"] == [128, 64]
    assert tensors["blk.0.ssm_conv1d.weight"].tensor_type.name == "F32"
    assert tensors["blk.0.attn_norm.weight"].tensor_type.name == "F32"
    assert tensors["blk.0.ffn_up.weight"].tensor_type.name == "BF16"


def test_qwen35_scalar_transformations(checkpoints: Callable, converted: Callable) -> None:
    from safetensors.torch import load_file

    src = checkpoints("qwen35")
    tensors = {t.name: np.asarray(t.data) for t in GGUFReader(converted("qwen35", "f32")).tensors}
    hf = {k: v.float().numpy() for k, v in load_file(str(src / "model.safetensors")).items()}
    a_log = hf["model.layers.0.linear_attn.A_log"]
    tiled = reorder_v_heads(a_log, 0, 2, 2, 1)
    np.testing.assert_allclose(tensors["blk.0.ssm_a"], -np.exp(tiled), rtol=1e-6)
    np.testing.assert_allclose(tensors["blk.0.attn_norm.weight"], hf["model.layers.0.input_layernorm.weight"] + 1)
    # the gated norm inside the DeltaNet is applied as is
    np.testing.assert_allclose(tensors["blk.0.ssm_norm.weight"], hf["model.layers.0.linear_attn.norm.weight"])


def test_reorder_v_heads_goes_from_grouped_to_tiled() -> None:
    # 2 K heads, 3 V heads each, head dim 1: grouped [k0v0 k0v1 k0v2 k1v0 k1v1 k1v2]
    grouped = np.array([0, 1, 2, 10, 11, 12])
    assert reorder_v_heads(grouped, 0, 2, 3, 1).tolist() == [0, 10, 1, 11, 2, 12]
    cols = np.arange(12).reshape(1, 12)  # head dim 2 along columns
    assert reorder_v_heads(cols, 1, 2, 3, 2).tolist() == [[0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11]]


def test_undo_rope_permute_pairs_halves() -> None:
    rows = np.arange(8).reshape(8, 1)  # one head of dim 8: [x0..x3 | y0..y3] -> pairs
    assert undo_hf_rope_permute(rows, 1).ravel().tolist() == [0, 4, 1, 5, 2, 6, 3, 7]


def test_bf16_round_trip_and_rounding() -> None:
    x = np.array([1.0, -2.5, 3.140625, 1e-3], dtype=np.float32)
    back = bf16_bits_to_f32(f32_to_bf16_bits(x))
    np.testing.assert_allclose(back, x, rtol=2 ** -8)
    assert f32_to_bf16_bits(np.array([1.0 + 2 ** -8], dtype=np.float32))[0] == 0x3F80  # ties to even


def test_no_mtp_drops_the_mtp_block(checkpoints: Callable, tmp_path: Path) -> None:
    out = convert_checkpoint(checkpoints("qwen35"), tmp_path / "nomtp.gguf", keep_mtp=False)
    f = _fields(out.path)
    assert f["qwen35.block_count"] == 4
    assert "qwen35.nextn_predict_layers" not in f
    assert not any(t.name.startswith("blk.4.") for t in GGUFReader(out.path).tensors)
    assert out.n_mtp_layers == 0


def test_no_mtp_and_mtp_give_the_same_logits(checkpoints: Callable, converted: Callable, tmp_path: Path) -> None:
    without = convert_checkpoint(checkpoints("qwen35"), tmp_path / "nomtp.gguf", keep_mtp=False).path
    tokens = [1, 5, 9, 42, 7, 100]
    np.testing.assert_allclose(
        llama_logits(load_llama(without), tokens), llama_logits(load_llama(converted("qwen35")), tokens), atol=1e-5
    )


def test_multimodal_layout_converts_to_the_same_model(checkpoints: Callable, converted: Callable, tmp_path: Path) -> None:
    """Qwen3.5's real checkpoints nest the text model (model.language_model.*, text_config)."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    src, dst = checkpoints("qwen35"), tmp_path / "multimodal"
    shutil.copytree(src, dst)
    flat = load_file(str(src / "model.safetensors"))
    save_file({k.replace("model.", "model.language_model.", 1): v for k, v in flat.items()}, str(dst / "model.safetensors"))
    index = json.loads((src / "model.safetensors.index.json").read_text())
    index["weight_map"] = {k.replace("model.layers", "model.language_model.layers").replace(
        "model.embed_tokens", "model.language_model.embed_tokens").replace("model.norm", "model.language_model.norm"): v
        for k, v in index["weight_map"].items()}
    (dst / "model.safetensors.index.json").write_text(json.dumps(index))
    text = json.loads((src / "config.json").read_text())
    cfg = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
           "text_config": text, "vision_config": {"depth": 1}, "tie_word_embeddings": True}
    (dst / "config.json").write_text(json.dumps(cfg))
    out = convert_checkpoint(dst, tmp_path / "mm.gguf").path
    ours = {t.name: np.asarray(t.data).copy() for t in GGUFReader(out).tensors}
    ref = {t.name: np.asarray(t.data).copy() for t in GGUFReader(converted("qwen35")).tensors}
    assert ours.keys() == ref.keys()
    for name in ref:
        np.testing.assert_array_equal(ours[name], ref[name], err_msg=name)


@pytest.mark.parametrize("arch,pre", [("qwen3", "qwen2"), ("llama", "llama-bpe")])
def test_dense_archs_metadata(arch: str, pre: str, converted: Callable) -> None:
    f = _fields(converted(arch))
    assert f["general.architecture"] == arch
    assert f["tokenizer.ggml.pre"] == pre
    assert f[f"{arch}.block_count"] == 2
    names = {t.name for t in GGUFReader(converted(arch)).tensors}
    assert "output.weight" in names  # untied
    assert ("blk.0.attn_q_norm.weight" in names) == (arch == "qwen3")
    assert f["tokenizer.ggml.add_bos_token"] is (arch == "llama")
