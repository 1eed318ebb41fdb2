"""Converted tiny checkpoints, run by llama.cpp, against transformers on the same weights."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from quantize.quantizer import quantize_gguf
from models.llama_runtime import open_for_logits as load_llama
from quantize.verify import Agreement, agreement, combine, hf_logits, llama_logits, load_hf_reference
from tests.quantize.checkpoints import SAMPLE_CODE, SPECIAL_TEXT

ARCHS = ["qwen35", "qwen3", "llama"]
PROMPTS = [
    "def fibonacci(n):\n    a, b = 0, 1",
    "The quick brown fox jumps over the lazy dog.",
    SAMPLE_CODE,
    SPECIAL_TEXT,
]


@cache
def _reference(src: Path) -> Any:
    return load_hf_reference(src)


def compare(gguf: Path, src: Path) -> Agreement:
    from transformers import AutoTokenizer  # (seconds to import: only where used)
    llm = load_llama(gguf)
    tok = AutoTokenizer.from_pretrained(src)
    parts = []
    for p in PROMPTS:
        ids = tok(p)["input_ids"]
        parts.append(agreement(llama_logits(llm, ids), hf_logits(_reference(src), ids)))
    return combine(parts)


@pytest.mark.parametrize("arch", ARCHS)
def test_f32_gguf_reproduces_transformers_logits(arch: str, checkpoints: Callable, converted: Callable) -> None:
    # F32 leaves only float rounding: any mistake in a transformation shows up far above 5e-3
    result = compare(converted(arch, "f32"), checkpoints(arch))
    assert result.top1_agree == result.positions, result.line()
    assert result.max_abs_err < 5e-3, result.line()


@pytest.mark.parametrize("arch", ARCHS)
def test_f16_gguf_matches_transformers(arch: str, checkpoints: Callable, converted: Callable) -> None:
    result = compare(converted(arch, "f16"), checkpoints(arch))
    assert result.top1_agree == result.positions, result.line()
    assert result.max_abs_err < 0.03, result.line()


@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_gguf_matches_transformers(arch: str, checkpoints: Callable, converted: Callable) -> None:
    # llama.cpp rounds activations to BF16 for BF16 weights, so a near-tie may flip
    result = compare(converted(arch, "bf16"), checkpoints(arch))
    assert result.top1_rate >= 0.97, result.line()
    assert result.max_abs_err < 0.06, result.line()


@pytest.mark.parametrize("arch", ARCHS)
def test_q8_0_stays_close(arch: str, checkpoints: Callable, converted: Callable, tmp_path: Path) -> None:
    q8 = quantize_gguf(converted(arch, "bf16"), tmp_path / "q8.gguf", "Q8_0")
    result = compare(q8, checkpoints(arch))
    assert result.top1_rate >= 0.9, result.line()
    assert result.max_abs_err < 0.25, result.line()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("text", [SAMPLE_CODE, SPECIAL_TEXT, "  x = 'héllo wörld'  # 3.14159\n\n\tüber\r\n"])
def test_llama_cpp_tokenises_like_hf(arch: str, text: str, checkpoints: Callable, converted: Callable) -> None:
    from transformers import AutoTokenizer  # (seconds to import: only where used)
    src = checkpoints(arch)
    ours = load_llama(converted(arch)).tokenize(text.encode(), add_bos=True, special=True)
    assert ours == AutoTokenizer.from_pretrained(src)(text)["input_ids"]


@pytest.mark.parametrize("arch", ARCHS)
def test_chat_template_renders_like_hf(arch: str, checkpoints: Callable, converted: Callable) -> None:
    from transformers import AutoTokenizer  # (seconds to import: only where used)
    llm = load_llama(converted(arch))
    template = llm.metadata["tokenizer.chat_template"]
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Fix main.py"}]
    ours = ImmutableSandboxedEnvironment().from_string(template).render(messages=messages, add_generation_prompt=True)
    theirs = AutoTokenizer.from_pretrained(checkpoints(arch)).apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert ours == theirs
    assert ours.endswith("<|im_start|>assistant\n<think>\n")
