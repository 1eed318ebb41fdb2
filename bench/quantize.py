"""Convert + quantise a synthetic checkpoint with FrogNano-4B's real shapes.

Writes a BF16 safetensors checkpoint (random weights, ~4.66 B parameters incl. the vision tower
and the MTP layer, ~9.3 GB in shards) straight to disk without holding it in RAM, then runs
``ribbit quantize`` phase by phase in child processes and reports wall time, peak RSS (and its
anonymous part, i.e. memory that is not page cache) and the output size. Prints figures; asserts
nothing. The Q4_K_M file is kept for the engine's speed measurements at real size.

    python -m bench.quantize [--out DIR] [--type Q4_K_M] [--keep-checkpoint] [--vocab V.gguf|synthetic]

DIR defaults to ribbit's cache (`$XDG_CACHE_HOME/ribbit/bench/frognano`), where bench.session and
bench.reasoning look for the Q4_K_M. The vocabulary defaults to Qwen's trained one (bench.assets).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bench.assets import frognano_folder, qwen_vocabulary
from quantize.quantizer import TYPES
from quantize.tokenizer import QWEN35_REGEX

# Qwen3.5-4B text model (FROGNANO.md) and a vision tower of the base model's size
H, FFN, LAYERS, VOCAB = 2560, 9216, 32, 248_320
N_HEAD, N_KV, HEAD = 16, 4, 256
LIN_K, LIN_V, LIN_DIM, CONV = 16, 32, 128, 4
VIS_DEPTH, VIS_H, VIS_FFN, VIS_OUT = 24, 1024, 4096, 2560
SHARD_BYTES = 2 * 1024**3
# What FrogNano ships besides its weights: Qwen3.5-4B's chat template (tools, Qwen3-Coder XML calls,
# `enable_thinking`; the copy the tests use, from llama.cpp's models/templates) and Qwen3.5's markers as
# single, non-special added tokens, so that ribbit detects FrogNano's dialect on this checkpoint and a
# recorded session costs the tokens it would.
QWEN35_TEMPLATE = Path(__file__).resolve().parents[1] / "tests" / "data" / "Qwen3.5-4B.jinja"
MARKERS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
# The tokenizer is Qwen's trained byte-level BPE (151,643 tokens) with Qwen3.5's pre-tokenizer: llama.cpp's
# tokenizer test vocabulary for qwen35, from the llama-cpp-python source archive (bench.assets fetches it
# once). FrogNano's own has 248,320 entries; this one spends about as many tokens on code and English, where
# the synthetic byte pairs spend twice as many (bench.session's recording: 9,478 tokens vs 19,426).
_POOL = None


def _pool() -> np.ndarray:
    # one 128 MiB block of random BF16 bits, sliced at varying offsets for every tensor:
    # generating 4.66 B fresh normals would dominate the benchmark and change nothing measured
    global _POOL
    if _POOL is None:
        x = np.random.default_rng(0).standard_normal(64 * 1024 * 1024, dtype=np.float32) * np.float32(0.02)
        _POOL = (x.view(np.uint32) >> 16).astype(np.uint16)
    return _POOL


def frognano_tensors() -> Iterator[tuple[str, tuple[int, ...]]]:
    t = "model.language_model."
    yield f"{t}embed_tokens.weight", (VOCAB, H)
    for i in range(LAYERS):
        p = f"{t}layers.{i}."
        yield f"{p}input_layernorm.weight", (H,)
        yield f"{p}post_attention_layernorm.weight", (H,)
        if (i + 1) % 4:
            a, conv_dim = f"{p}linear_attn.", 2 * LIN_K * LIN_DIM + LIN_V * LIN_DIM
            yield f"{a}in_proj_qkv.weight", (conv_dim, H)
            yield f"{a}in_proj_z.weight", (LIN_V * LIN_DIM, H)
            yield f"{a}in_proj_a.weight", (LIN_V, H)
            yield f"{a}in_proj_b.weight", (LIN_V, H)
            yield f"{a}A_log", (LIN_V,)
            yield f"{a}dt_bias", (LIN_V,)
            yield f"{a}conv1d.weight", (conv_dim, 1, CONV)
            yield f"{a}norm.weight", (LIN_DIM,)
            yield f"{a}out_proj.weight", (H, LIN_V * LIN_DIM)
        else:
            yield from _attention(f"{p}self_attn.")
        yield from _mlp(f"{p}mlp.")
    yield f"{t}norm.weight", (H,)
    m = "mtp.layers.0."
    yield f"{m}input_layernorm.weight", (H,)
    yield f"{m}post_attention_layernorm.weight", (H,)
    yield from _attention(f"{m}self_attn.")
    yield from _mlp(f"{m}mlp.")
    yield "mtp.fc.weight", (H, 2 * H)
    for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        yield f"mtp.{n}.weight", (H,)
    v = "model.visual."
    yield f"{v}patch_embed.proj.weight", (VIS_H, 3, 2, 16, 16)
    yield f"{v}pos_embed.weight", (2304, VIS_H)
    for i in range(VIS_DEPTH):
        b = f"{v}blocks.{i}."
        yield f"{b}attn.qkv.weight", (3 * VIS_H, VIS_H)
        yield f"{b}attn.proj.weight", (VIS_H, VIS_H)
        yield f"{b}mlp.linear_fc1.weight", (VIS_FFN, VIS_H)
        yield f"{b}mlp.linear_fc2.weight", (VIS_H, VIS_FFN)
    yield f"{v}merger.linear_fc1.weight", (4 * VIS_H, 4 * VIS_H)
    yield f"{v}merger.linear_fc2.weight", (VIS_OUT, 4 * VIS_H)


def _attention(p: str) -> Iterator[tuple[str, tuple[int, ...]]]:
    yield f"{p}q_proj.weight", (2 * N_HEAD * HEAD, H)
    yield f"{p}k_proj.weight", (N_KV * HEAD, H)
    yield f"{p}v_proj.weight", (N_KV * HEAD, H)
    yield f"{p}o_proj.weight", (H, N_HEAD * HEAD)
    yield f"{p}q_norm.weight", (HEAD,)
    yield f"{p}k_norm.weight", (HEAD,)


def _mlp(p: str) -> Iterator[tuple[str, tuple[int, ...]]]:
    yield f"{p}gate_proj.weight", (FFN, H)
    yield f"{p}up_proj.weight", (FFN, H)
    yield f"{p}down_proj.weight", (H, FFN)


def _write_shard(path: Path, tensors: list[tuple[str, tuple[int, ...]]], seed: int) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    pool, pos = _pool(), seed * 7919
    with path.open("wb") as fh:
        fh.write(len(blob).to_bytes(8, "little") + blob)
        for _, shape in tensors:
            left = int(np.prod(shape))
            while left:
                start = pos % (pool.size - 1)
                take = min(left, pool.size - start)
                pool[start:start + take].tofile(fh)
                left -= take
                pos += take + 104_729


def _synthetic_bpe() -> tuple[dict[str, int], list[list[str]]]:
    """A byte-level BPE vocabulary of the real size, made of byte pairs and triples (a text costs about
    twice the tokens a trained vocabulary spends on it)."""
    alphabet = [chr(c) for c in range(0x21, 0x7F)] + [chr(c) for c in range(0xA1, 0xAD)] + [chr(c) for c in range(0xAE, 0x100)]
    alphabet += [chr(0x100 + i) for i in range(256 - len(alphabet))]
    vocab: dict[str, int] = {c: i for i, c in enumerate(alphabet)}
    merges: list[list[str]] = []
    target = VOCAB - 300
    for a in alphabet:
        for b in alphabet:
            if len(vocab) >= target:
                break
            vocab[a + b] = len(vocab)
            merges.append([a, b])
    for ab in list(vocab)[256:]:
        for c in alphabet[:8]:
            if len(vocab) >= target:
                break
            vocab[ab + c] = len(vocab)
            merges.append([ab, c])
    return vocab, merges


def _trained_bpe(path: Path) -> tuple[dict[str, int], list[list[str]]]:
    """The normal tokens and merges of a GGUF vocabulary (its control and added tokens are left out)."""
    from gguf import GGUFReader

    fields = GGUFReader(path).fields
    tokens, types, merges = (fields[f"tokenizer.ggml.{k}"] for k in ("tokens", "token_type", "merges"))
    vocab: dict[str, int] = {}
    for at, kind in zip(tokens.data, types.data):
        if int(types.parts[kind][0]) == 1:  # NORMAL
            vocab[bytes(tokens.parts[at]).decode("utf-8")] = len(vocab)
    pairs = [bytes(merges.parts[at]).decode("utf-8").split(" ", 1) for at in merges.data]
    return vocab, pairs


def _tokenizer_files(out: Path, vocab_file: Path | None) -> int:
    """tokenizer.json and tokenizer_config.json; returns the end-of-turn token's id."""
    vocab, merges = _trained_bpe(vocab_file) if vocab_file else _synthetic_bpe()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    added = [{"id": len(vocab) + i, "content": s, "special": i < len(specials), "normalized": False,
              "single_word": False, "lstrip": False, "rstrip": False} for i, s in enumerate(specials + MARKERS)]
    tok = {
        "version": "1.0", "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN35_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges},
    }
    (out / "tokenizer.json").write_text(json.dumps(tok))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "add_bos_token": False,
        "chat_template": QWEN35_TEMPLATE.read_text(encoding="utf-8"),
    }))
    return len(vocab) + specials.index("<|im_end|>")


def write_checkpoint(out: Path, vocab_file: Path | None = None) -> tuple[int, int]:
    out.mkdir(parents=True, exist_ok=True)
    tensors = list(frognano_tensors())
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in tensors:
        n = int(np.prod(shape)) * 2
        if size + n > SHARD_BYTES and shards[-1]:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += n
    weight_map = {}
    for i, group in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        _write_shard(out / fname, group, i)
        weight_map.update({name: fname for name, _ in group})
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    eos = _tokenizer_files(out, vocab_file)
    text = {
        "model_type": "qwen3_5_text", "hidden_size": H, "intermediate_size": FFN, "num_hidden_layers": LAYERS,
        "num_attention_heads": N_HEAD, "num_key_value_heads": N_KV, "head_dim": HEAD, "vocab_size": VOCAB,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(LAYERS)],
        "full_attention_interval": 4, "linear_conv_kernel_dim": CONV, "linear_key_head_dim": LIN_DIM,
        "linear_value_head_dim": LIN_DIM, "linear_num_key_heads": LIN_K, "linear_num_value_heads": LIN_V,
        "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        "mtp_num_hidden_layers": 1, "eos_token_id": eos,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10_000_000, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": True},
    }
    config = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
              "tie_word_embeddings": True, "text_config": text, "vision_config": {"depth": VIS_DEPTH}}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    n_params = sum(int(np.prod(s)) for _, s in tensors)
    return n_params, sum(p.stat().st_size for p in out.glob("*.safetensors"))


def _status_kb(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def measure(cmd: list[str], quiet: bool = False, ok: tuple[int, ...] = (0,)) -> dict[str, float]:
    """Run ``cmd``; wall time, peak RSS (kernel's, includes mapped page cache) and peak anonymous RSS.
    An exit status outside `ok` ends the benchmark."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL if quiet else None, stdin=subprocess.DEVNULL)
    peak_anon = 0

    def sample() -> None:
        nonlocal peak_anon
        while proc.poll() is None:
            # the quantiser runs in a grandchild: sample the whole process tree
            pids = [proc.pid] + _children(proc.pid)
            peak_anon = max(peak_anon, sum(_status_kb(p, "RssAnon") for p in pids))
            time.sleep(0.2)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    t.join()
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} failed with {proc.returncode}")
    return {"wall_s": time.monotonic() - start, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_gb": usage.ru_maxrss * 1024 / 1e9, "peak_rss_gib": usage.ru_maxrss / 2**20,
            "peak_anon_gb": peak_anon * 1024 / 1e9}


def _children(pid: int) -> list[int]:
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    out = [int(k) for k in kids]
    for k in list(out):
        out += _children(k)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.quantize", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=frognano_folder(), help="working directory (default: %(default)s)")
    ap.add_argument("--type", default="Q4_K_M")
    ap.add_argument("--keep-checkpoint", action="store_true", help="keep the synthetic safetensors")
    ap.add_argument("--vocab", default=None,
                    help="a GGUF whose trained BPE the checkpoint's tokenizer takes (default: Qwen's, fetched once; "
                         "'synthetic': byte pairs)")
    args = ap.parse_args(argv)
    if args.vocab is None:
        args.vocab = str(qwen_vocabulary())
    elif args.vocab == "synthetic":
        args.vocab = ""
    work: Path = args.out
    ckpt, mid, final = work / "frognano-synthetic", work / "frognano-synthetic.BF16.gguf", work / f"frognano-synthetic-{args.type}.gguf"
    work.mkdir(parents=True, exist_ok=True)

    t0 = time.monotonic()
    n_params, n_bytes = write_checkpoint(ckpt, Path(args.vocab) if args.vocab else None)
    print(f"checkpoint: {n_params / 1e9:.2f} B parameters, {n_bytes / 1e9:.2f} GB BF16 safetensors, "
          f"written in {time.monotonic() - t0:.0f} s -> {ckpt}; tokenizer: "
          f"{args.vocab or 'synthetic byte pairs and triples'}", flush=True)
    os.sync()

    conv = measure([sys.executable, "-m", "quantize.cli", str(ckpt), "-o", str(mid), "--type", "BF16"])
    print(f"convert  -> BF16 GGUF: {conv['wall_s']:.0f} s ({conv['cpu_s']:.0f} s CPU), peak RSS {conv['peak_rss_gb']:.2f} GB "
          f"(anonymous {conv['peak_anon_gb']:.2f} GB), {mid.stat().st_size / 1e9:.2f} GB", flush=True)
    quant = measure([sys.executable, "-m", "quantize._quantize_worker", str(mid), str(final),
                     str(TYPES[args.type].ftype)], quiet=True)
    print(f"quantize -> {args.type}: {quant['wall_s']:.0f} s ({quant['cpu_s']:.0f} s CPU), peak RSS {quant['peak_rss_gb']:.2f} GB "
          f"(anonymous {quant['peak_anon_gb']:.2f} GB), {final.stat().st_size / 1e9:.2f} GB -> {final}", flush=True)
    print(f"total convert + quantize: {conv['wall_s'] + quant['wall_s']:.0f} s; load average at the end "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (the machine is shared)", flush=True)
    mid.unlink(missing_ok=True)
    if not args.keep_checkpoint:
        shutil.rmtree(ckpt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
