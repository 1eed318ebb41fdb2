"""Engine tests: the real llama.cpp backend on the embedded SmolLM2 GGUF, kept tiny (2 shared cores)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from models.base import GenerationRequest, PrefillProgress, TextChunk, TurnEnd
from models.chat import ChatMessage
from models.embedded import embedded_model_path
from models.llama_backend import LlamaCppModel

SYSTEM = ChatMessage(role="system", content="You are a terse assistant. Answer in a few words.")


def make_model(state_dir: Path, **options: object) -> LlamaCppModel:
    # Threads pinned: llama.cpp's rounding (and so a greedy near-tie) depends on the thread count.
    settings: dict[str, object] = dict(n_ctx=1024, temperature=0.0, prefill_chunk=16, state_dir=state_dir, n_threads=2)
    settings.update(options)
    return LlamaCppModel(embedded_model_path(), **settings)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def tiny_gemma4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random `gemma4` GGUF with Gemma 4's tokenizer markers and chat template (tests/engine/tiny_gemma4.py)."""
    from tests.engine.tiny_gemma4 import build_tiny_gemma4

    return build_tiny_gemma4(tmp_path_factory.mktemp("tiny-gemma4") / "tiny-gemma4.gguf")


def run_turn(
    model: LlamaCppModel, messages: list[ChatMessage], max_tokens: int = 6,
    should_stop: Callable[[], bool] | None = None, tools: list | None = None,
) -> tuple[str, TurnEnd, list[PrefillProgress]]:
    request = GenerationRequest(messages=messages, tools=tools or [], max_tokens=max_tokens)
    if should_stop is not None:
        request.should_stop = should_stop
    text, end, progress = "", None, []
    for chunk in model.generate(request):
        if isinstance(chunk, TextChunk):
            text += chunk.text
        elif isinstance(chunk, PrefillProgress):
            progress.append(chunk)
        elif isinstance(chunk, TurnEnd):
            end = chunk
    assert end is not None
    return text, end, progress


def prefill_only(model: LlamaCppModel, messages: list[ChatMessage]) -> TurnEnd:
    """Evaluate the turn's prompt and stop before the first sampled token."""
    state = {"prefilled": False}

    def stop() -> bool:
        return state["prefilled"]

    request = GenerationRequest(messages=messages, tools=[], max_tokens=4, should_stop=stop)
    end = None
    for chunk in model.generate(request):
        if isinstance(chunk, PrefillProgress) and chunk.done == chunk.total:
            state["prefilled"] = True
        elif isinstance(chunk, TurnEnd):
            end = chunk
    assert end is not None and end.usage.completion_tokens == 0
    return end


def fresh_logits(tokens: list[int]) -> np.ndarray:
    """Logits after evaluating `tokens` from scratch in a new context, in one batch."""
    from models.llama_runtime import open_llama

    llm = open_llama(model_path=str(embedded_model_path()), n_ctx=1024, n_batch=512, n_threads=2, verbose=False)
    try:
        llm.eval(tokens)
        pointer = llm._ctx.get_logits_ith(-1)
        return np.ctypeslib.as_array(pointer, shape=(llm.n_vocab(),)).copy()
    finally:
        llm.close()


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def assert_same_logits(a: np.ndarray, b: np.ndarray, probability_gap: float = 0.1) -> None:
    """Same next-token distribution. A batch of one and a batch of many round differently in llama.cpp
    (other kernels: on the embedded Q8_0 copy logits differ by ~1 at most, probabilities by up to ~0.035;
    on the shipped Q4_1 ~0.003); a wrong cache is off by ~15 and ~0.9."""
    assert a.shape == b.shape
    assert int(a.argmax()) == int(b.argmax())
    assert float(np.abs(softmax(a) - softmax(b)).max()) < probability_gap
    assert float(np.abs(a - b).max()) < 3.0


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "states"


@pytest.fixture(scope="session")
def tiny_qwen35(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random qwen35 (hybrid Gated DeltaNet) GGUF with its MTP layer, built by our own converter."""
    from quantize.convert import convert_checkpoint
    from tests.quantize.checkpoints import make_qwen35

    folder = tmp_path_factory.mktemp("tiny-qwen35")
    source = make_qwen35(folder / "checkpoint", mtp=True)
    result = convert_checkpoint(source, folder / "tiny-qwen35-f16.gguf", weight_dtype="f16")
    assert result.n_mtp_layers == 1
    return result.path
