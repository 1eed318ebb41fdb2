"""Tiny random HF checkpoints for the converter tests, built entirely offline.

Each is saved in BF16 safetensors beside a small byte-level BPE tokenizer trained here with the
``tokenizers`` library, using the same pre-tokenizer regex as the real model family.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

if TYPE_CHECKING:  # torch and transformers take seconds to import: every test process collects this module
    import torch
    from transformers import PreTrainedTokenizerFast

from quantize.tokenizer import LLAMA3_REGEX, QWEN2_REGEX, QWEN35_REGEX

CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"
)

SAMPLE_CODE = '''def fibonacci(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)  # O(1)
'''
SPECIAL_TEXT = "<|im_start|>user\nFix the bug in main.py<|im_end|>\n<|im_start|>assistant\n<think>\nIt's 42.</think>"

_CORPUS = [
    SAMPLE_CODE,
    "The quick brown fox jumps over the lazy dog. We've been told they'll say it's done!",
    "import os\nimport sys\nfrom pathlib import Path\n\nif __name__ == '__main__':\n    sys.exit(main())\n",
    "for i in range(10):\n\tprint(i * 2, end=' ')\nx = [1, 22, 333, 4444]\n",
    "Tests pass: 123 passed, 4 failed in 5.67s\nTraceback (most recent call last):\n  File \"a.py\", line 3\n",
]


def train_tokenizer(
    out: Path, *, regex: str, bos: str | None, eos: str, specials: list[str], vocab_size: int = 700,
    corpus: list[str] | None = None,
) -> PreTrainedTokenizerFast:
    """`vocab_size` / `corpus`: a richer tokenizer (more merges, trained on more text) for tests whose
    token counts should look like a real model's on that text."""
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(regex), behavior="isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator((_CORPUS + (corpus or [])) * 20, trainer)
    # Qwen-style non-special added tokens: matched whole, but not "special"
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ("<think>", "</think>", "<tool_call>")])
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, pad_token=specials[0])
    fast.chat_template = CHATML
    fast.save_pretrained(out)
    return fast


def _randomise(model: torch.nn.Module, seed: int) -> None:
    import torch
    # HF initialises norms to exactly 0 or 1; random values make the +1 / -exp fixes observable
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log") or name.endswith("dt_bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif "norm" in name:
                p.add_(torch.randn(p.shape, generator=g) * 0.2)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.04)  # small enough not to be chaotic


def _save(model: torch.nn.Module, out: Path) -> None:
    import torch
    model.to(torch.bfloat16).save_pretrained(out)


def make_qwen35(
    out: Path, *, mtp: bool = True, vision: bool = True, seed: int = 0, vocab_size: int = 700, corpus: list[str] | None = None,
) -> Path:
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(out, regex=QWEN35_REGEX, bos=None, eos="<|im_end|>",
                          specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], vocab_size=vocab_size, corpus=corpus)
    cfg = Qwen3_5TextConfig(
        vocab_size=len(tok) + 5,  # padded like the real 248,320 vocabulary
        hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,  # K heads != V heads: exercises the reorder
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=True,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
    )
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(cfg)
    _randomise(model, seed)
    _save(model, out)
    extra: dict[str, torch.Tensor] = {}
    g = torch.Generator().manual_seed(seed + 1)

    def rnd(*shape: int) -> torch.Tensor:
        return (torch.randn(shape, generator=g) * 0.08).to(torch.bfloat16)

    h, f = 64, 128
    if mtp:
        m = "mtp.layers.0."
        extra.update({
            "mtp.fc.weight": rnd(h, 2 * h), "mtp.pre_fc_norm_embedding.weight": rnd(h),
            "mtp.pre_fc_norm_hidden.weight": rnd(h), "mtp.norm.weight": rnd(h),
            f"{m}input_layernorm.weight": rnd(h), f"{m}post_attention_layernorm.weight": rnd(h),
            f"{m}self_attn.q_proj.weight": rnd(4 * 32 * 2, h), f"{m}self_attn.k_proj.weight": rnd(2 * 32, h),
            f"{m}self_attn.v_proj.weight": rnd(2 * 32, h), f"{m}self_attn.o_proj.weight": rnd(h, 4 * 32),
            f"{m}self_attn.q_norm.weight": rnd(32), f"{m}self_attn.k_norm.weight": rnd(32),
            f"{m}mlp.gate_proj.weight": rnd(f, h), f"{m}mlp.up_proj.weight": rnd(f, h), f"{m}mlp.down_proj.weight": rnd(h, f),
        })
    if vision:
        extra.update({"model.visual.patch_embed.proj.weight": rnd(32, 3, 2, 2, 2),
                      "model.visual.blocks.0.attn.qkv.weight": rnd(96, 32)})
    if extra:
        _add_shard(out, extra, mtp_layers=1 if mtp else 0)
    return out


def _add_shard(out: Path, tensors: dict[str, torch.Tensor], mtp_layers: int) -> None:
    from safetensors.torch import save_file
    from safetensors import safe_open

    save_file(tensors, str(out / "model-extra.safetensors"), metadata={"format": "pt"})
    with safe_open(str(out / "model.safetensors"), "pt") as fh:
        base = list(fh.keys())
    weight_map = {k: "model.safetensors" for k in base} | {k: "model-extra.safetensors" for k in tensors}
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    if mtp_layers:
        cfg = json.loads((out / "config.json").read_text())
        cfg["mtp_num_hidden_layers"] = mtp_layers
        (out / "config.json").write_text(json.dumps(cfg, indent=2))


def make_qwen3(out: Path, seed: int = 0) -> Path:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(out, regex=QWEN2_REGEX, bos=None, eos="<|im_end|>",
                          specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    cfg = Qwen3Config(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=False,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg)
    _randomise(model, seed)
    _save(model, out)
    return out


def make_llama(out: Path, seed: int = 0) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(out, regex=LLAMA3_REGEX, bos="<|begin_of_text|>", eos="<|eot_id|>",
                          specials=["<|end_of_text|>", "<|begin_of_text|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>"])
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        rope_parameters={"rope_type": "default", "rope_theta": 5e5}, tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    _randomise(model, seed)
    _save(model, out)
    return out
