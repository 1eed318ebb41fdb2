"""``--verify``: load the GGUF with llama.cpp, generate a few tokens and, when transformers is
installed, compare its logits with the Hugging Face reference on a few prompts.

quantize never imports models: the entry point hands `run_verify` the loader (models.llama_runtime's
`open_for_logits`, which keeps its AMX guard)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from llama_cpp import Llama

VERIFY_PROMPTS: tuple[str, ...] = (
    "def fibonacci(n):\n    ",
    "The quick brown fox jumps over the lazy dog, and then",
    "import os\nimport sys\n\nif __name__ == '__main__':\n",
)


@dataclass(frozen=True)
class Agreement:
    positions: int
    top1_agree: int
    max_abs_err: float
    max_abs_ref: float

    @property
    def top1_rate(self) -> float:
        return self.top1_agree / max(1, self.positions)

    def line(self) -> str:
        return (
            f"top-1 agreement {self.top1_agree}/{self.positions} ({self.top1_rate:.1%}), "
            f"max |logit diff| {self.max_abs_err:.4f} (max |logit| {self.max_abs_ref:.2f})"
        )


# Loads a GGUF with llama.cpp, every position's logits kept (models.llama_runtime.open_for_logits).
LlamaLoader = Callable[[Path], "Llama"]


def llama_logits(llm: Llama, tokens: Sequence[int]) -> np.ndarray:
    """Logits for every position, shape (len(tokens), n_vocab)."""
    llm.reset()
    llm.eval(list(tokens))
    return np.array(llm.scores[: len(tokens)], dtype=np.float32)


def greedy(llm: Llama, prompt: str, n_tokens: int) -> str:
    """Greedy continuation, token by token (create_completion keeps going while a random model
    emits partial UTF-8, so it is not used for this check)."""
    llm.reset()
    tokens = llm.tokenize(prompt.encode(), add_bos=True, special=True)
    llm.eval(tokens)
    out: list[int] = []
    for _ in range(n_tokens):
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(nxt)
        llm.eval([nxt])
    return llm.detokenize(out).decode("utf-8", errors="replace")


def hf_logits(model: Any, tokens: Sequence[int]) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = model(torch.tensor([list(tokens)]))
    return out.logits[0].float().numpy()


def agreement(ours: np.ndarray, ref: np.ndarray) -> Agreement:
    n = min(ours.shape[1], ref.shape[1])
    ours, ref = ours[:, :n], ref[:, :n]
    return Agreement(
        positions=ours.shape[0],
        top1_agree=int((ours.argmax(-1) == ref.argmax(-1)).sum()),
        max_abs_err=float(np.abs(ours - ref).max()),
        max_abs_ref=float(np.abs(ref).max()),
    )


def combine(parts: Sequence[Agreement]) -> Agreement:
    return Agreement(
        positions=sum(p.positions for p in parts),
        top1_agree=sum(p.top1_agree for p in parts),
        max_abs_err=max(p.max_abs_err for p in parts),
        max_abs_ref=max(p.max_abs_ref for p in parts),
    )


def load_hf_reference(src: Path) -> Any:
    """The HF model in float32 (or bfloat16 when float32 would not fit comfortably), text part only."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    config = AutoConfig.from_pretrained(src)
    n_bytes = sum(p.stat().st_size for p in src.glob("*.safetensors"))
    dtype = torch.float32 if n_bytes < 2e9 else torch.bfloat16
    if getattr(config, "text_config", None) is not None and "ForConditionalGeneration" in config.architectures[0]:
        from transformers import AutoModelForImageTextToText

        return AutoModelForImageTextToText.from_pretrained(src, dtype=dtype).eval()
    return AutoModelForCausalLM.from_pretrained(src, dtype=dtype).eval()


def run_verify(gguf_path: Path, src: Path | None, say: Any, load: LlamaLoader, n_tokens: int = 8) -> None:
    """`src`: the HF checkpoint to compare with; None (a GGUF SRC) checks loading and generation only."""
    llm = load(gguf_path)
    prompt = VERIFY_PROMPTS[0]
    text = greedy(llm, prompt, n_tokens)
    say(f"verify: llama.cpp loaded {gguf_path.name} and generated {n_tokens} tokens: {prompt + text!r}")
    if src is None:
        say("verify: SRC is a GGUF, so there is no Hugging Face reference to compare logits with")
        return
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        say("verify: transformers not installed; skipped the logit comparison with the HF reference")
        return
    try:
        model = load_hf_reference(src)
    except Exception as exc:  # the reference is optional; say why it did not run
        say(f"verify: could not load the HF reference ({type(exc).__name__}: {exc}); skipped the comparison")
        return
    parts = []
    for p in VERIFY_PROMPTS:
        tokens = llm.tokenize(p.encode(), add_bos=True, special=True)
        parts.append(agreement(llama_logits(llm, tokens), hf_logits(model, tokens)))
    say(f"verify: vs transformers on {len(VERIFY_PROMPTS)} prompts: {combine(parts).line()}")
