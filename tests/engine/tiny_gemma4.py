"""A tiny random `gemma4` GGUF, written with the `gguf` package, that the vendored llama.cpp loads and runs.

Every key and tensor is one the vendored loader reads for LLM_ARCH_GEMMA4 (llama.cpp
src/models/gemma4.cpp `load_arch_hparams` / `load_arch_tensors`, names from src/llama-arch.cpp), in the
shapes the real checkpoints have, scaled down: sliding-window layers beside a full-attention layer with
its own head size, KV-head count and proportional RoPE (`rope_freqs`), per-layer embeddings (as the E2B /
E4B models have), a layer output scale, final-logit soft-capping and tied embeddings.

The tokenizer is Gemma 4's kind (`tokenizer.ggml.model = gemma4`: SPM-style BPE, spaces as U+2581,
`<0xXX>` byte fallback) over a reused small vocabulary — SmolLM2's, shipped with ribbit, with its byte-level
pieces decoded back to text — plus Gemma 4's special tokens, so every marker of the chat template is a
single token. The chat template is Gemma 4's own (tests/data/google-gemma-4-31B-it.jinja, copied from the
llama.cpp that llama-cpp-python 0.3.36 vendors).

The weights are random, except that the output rows of a few hundred frequent tokens (printable ASCII,
digits, the call syntax and end-of-turn tokens) are scaled up: like a trained model, it prefers frequent
tokens, so a string it opens is also closed within tens of tokens. It still writes meaningless text.

`python -m tests.engine.tiny_gemma4 OUT.gguf` writes one (for `python -m bench.engine --model OUT.gguf`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

TEMPLATE = Path(__file__).resolve().parents[1] / "data" / "google-gemma-4-31B-it.jinja"
ESCAPED_SPACE = "\u2581"

# (text, llama.cpp token type): 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte. Gemma 4's converter
# makes the markers a chat parser must see USER_DEFINED, as here.
SPECIAL_TOKENS: list[tuple[str, int]] = [
    ("<pad>", 3), ("<eos>", 3), ("<bos>", 3), ("<unk>", 2), ("<mask>", 3),
    ("<|turn>", 3), ("<turn|>", 3), ("<|think|>", 3), ("<|tool>", 3), ("<tool|>", 3),
    ("<|image|>", 3), ("<|audio|>", 3), ("<|video|>", 3),
    ("<|channel>", 4), ("<channel|>", 4), ("<|tool_call>", 4), ("<tool_call|>", 4),
    ("<|tool_response>", 4), ("<tool_response|>", 4), ('<|"|>', 4),
]
PAD, EOS, BOS, UNK = 0, 1, 2, 3
# Tokens the model prefers (see the module docstring), with how strongly.
FAVOURED = {'<|"|>': 3.0, "<tool_call|>": 2.0, "<|tool_response>": 2.0, "<turn|>": 1.5}

# Shapes (a real Gemma 4: 30-60 layers, hidden 2816-5376, window 512-1024).
N_LAYER = 4
SWA_LAYERS = [True, True, True, False]  # three sliding-window layers, then a full-attention one
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = [2, 2, 2, 1]  # full-attention layers have fewer KV heads
HEAD_DIM_SWA = 16
HEAD_DIM_FULL = 32
N_FF = 128
N_EMBD_PER_LAYER = 8
SLIDING_WINDOW = 32
PARTIAL_ROTARY_FULL = 0.25  # "proportional" RoPE on full-attention layers


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the character a byte-level BPE writes for each byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def gemma_vocabulary() -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges): Gemma 4's special and byte tokens, then SmolLM2's vocabulary as text."""
    import gguf

    from models.embedded import embedded_model_path

    reader = gguf.GGUFReader(embedded_model_path())
    source_tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    source_types = reader.fields["tokenizer.ggml.token_type"].contents()
    source_merges = reader.fields["tokenizer.ggml.merges"].contents()
    decode = _byte_decoder()

    def as_text(piece: str) -> str | None:
        try:
            raw = bytes(decode[ch] for ch in piece)
            return raw.decode("utf-8").replace(" ", ESCAPED_SPACE)
        except (KeyError, UnicodeDecodeError):
            return None  # a piece of a multi-byte character: the byte fallback covers it

    tokens = [text for text, _ in SPECIAL_TOKENS] + [f"<0x{b:02X}>" for b in range(256)]
    types = [kind for _, kind in SPECIAL_TOKENS] + [6] * 256
    known = set(tokens)
    for piece, kind in zip(source_tokens, source_types):
        text = as_text(piece) if kind == 1 else None
        if text and text not in known:
            known.add(text)
            tokens.append(text)
            types.append(1)
    merges = []
    for merge in source_merges:
        left, _, right = merge.partition(" ")
        a, b = as_text(left), as_text(right)
        if a and b and a in known and b in known and a + b in known:
            merges.append(f"{a} {b}")
    return tokens, types, merges


def _favoured_rows(tokens: list[str]) -> dict[int, float]:
    index = {t: i for i, t in enumerate(tokens)}
    rows = {index[t]: scale for t, scale in FAVOURED.items()}
    for ch in [chr(c) for c in range(33, 127)] + [ESCAPED_SPACE, "\n"]:
        if ch in index:
            rows.setdefault(index[ch], 1.0)
    return rows


def build_tiny_gemma4(path: Path, seed: int = 0) -> Path:
    import gguf

    rng = np.random.default_rng(seed)
    tokens, types, merges = gemma_vocabulary()
    n_vocab = len(tokens)

    def weight(*shape: int, scale: float = 0.08) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def norm(size: int) -> np.ndarray:
        return rng.uniform(0.6, 1.4, size).astype(np.float32)  # Gemma 4 stores norm weights as used (no +1)

    writer = gguf.GGUFWriter(str(path), "gemma4")
    writer.add_name("tiny-gemma4")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(32768)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_key_length(HEAD_DIM_FULL)
    writer.add_value_length(HEAD_DIM_FULL)
    writer.add_key_length_swa(HEAD_DIM_SWA)
    writer.add_value_length_swa(HEAD_DIM_SWA)
    writer.add_rope_dimension_count(HEAD_DIM_FULL)
    writer.add_rope_dimension_count_swa(HEAD_DIM_SWA)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_rope_freq_base_swa(10_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_sliding_window(SLIDING_WINDOW)
    writer.add_sliding_window_pattern(SWA_LAYERS)
    writer.add_shared_kv_layers(0)
    writer.add_embedding_length_per_layer_input(N_EMBD_PER_LAYER)
    writer.add_final_logit_softcapping(30.0)

    writer.add_tokenizer_model("gemma4")
    writer.add_tokenizer_pre("gemma4")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * n_vocab)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)
    writer.add_unk_token_id(UNK)
    writer.add_pad_token_id(PAD)
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(False)
    writer.add_chat_template(TEMPLATE.read_text(encoding="utf-8"))

    embeddings = weight(n_vocab, N_EMBD, scale=0.5)
    for row, scale in _favoured_rows(tokens).items():
        embeddings[row] *= 8.0 * scale  # tied: these rows are also the output weights
    writer.add_tensor("token_embd.weight", embeddings.astype(np.float16))
    writer.add_tensor("per_layer_token_embd.weight", weight(n_vocab, N_EMBD_PER_LAYER * N_LAYER, scale=0.5).astype(np.float16))
    writer.add_tensor("per_layer_model_proj.weight", weight(N_EMBD_PER_LAYER * N_LAYER, N_EMBD))
    writer.add_tensor("per_layer_proj_norm.weight", norm(N_EMBD_PER_LAYER))
    writer.add_tensor("output_norm.weight", norm(N_EMBD))
    rotated = int(HEAD_DIM_FULL * PARTIAL_ROTARY_FULL / 2)
    freqs = [1.0] * rotated + [1e30] * (HEAD_DIM_FULL // 2 - rotated)  # as the converter writes them
    writer.add_tensor("rope_freqs.weight", np.array(freqs, dtype=np.float32))
    for i in range(N_LAYER):
        head_dim = HEAD_DIM_SWA if SWA_LAYERS[i] else HEAD_DIM_FULL
        kv_dim = N_HEAD_KV[i] * head_dim
        blk = f"blk.{i}"
        writer.add_tensor(f"{blk}.attn_norm.weight", norm(N_EMBD))
        writer.add_tensor(f"{blk}.attn_q.weight", weight(N_HEAD * head_dim, N_EMBD))
        writer.add_tensor(f"{blk}.attn_k.weight", weight(kv_dim, N_EMBD))
        writer.add_tensor(f"{blk}.attn_v.weight", weight(kv_dim, N_EMBD))
        writer.add_tensor(f"{blk}.attn_output.weight", weight(N_EMBD, N_HEAD * head_dim))
        writer.add_tensor(f"{blk}.attn_q_norm.weight", norm(head_dim))
        writer.add_tensor(f"{blk}.attn_k_norm.weight", norm(head_dim))
        writer.add_tensor(f"{blk}.post_attention_norm.weight", norm(N_EMBD))
        writer.add_tensor(f"{blk}.layer_output_scale.weight", np.array([rng.uniform(0.5, 1.0)], dtype=np.float32))
        writer.add_tensor(f"{blk}.ffn_norm.weight", norm(N_EMBD))
        writer.add_tensor(f"{blk}.ffn_gate.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(f"{blk}.ffn_up.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(f"{blk}.ffn_down.weight", weight(N_EMBD, N_FF))
        writer.add_tensor(f"{blk}.post_ffw_norm.weight", norm(N_EMBD))
        writer.add_tensor(f"{blk}.inp_gate.weight", weight(N_EMBD_PER_LAYER, N_EMBD))
        writer.add_tensor(f"{blk}.proj.weight", weight(N_EMBD, N_EMBD_PER_LAYER))
        writer.add_tensor(f"{blk}.post_norm.weight", norm(N_EMBD))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tiny-gemma4.gguf")
    print(build_tiny_gemma4(out))
