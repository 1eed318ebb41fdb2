"""`ribbit eval --samples` through the real llama.cpp backend: each sample's seed reaches llama.cpp (on
the embedded GGUF and on a tiny qwen35 GGUF built here with our converter), and an eval job runs end to
end on the embedded GGUF."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.evaluation.runner import EvalConfig, EvalRun, seed_for
from agent.evaluation.tasks import load_tasks
from agent.core.loop import Limits
from models.base import GenerationRequest, TextChunk
from models.chat import ChatMessage
from models.embedded import embedded_model_path
from models.backends import load_model

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def tiny_qwen35(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from quantize.convert import convert_checkpoint
    from tests.quantize.checkpoints import make_qwen35

    folder = tmp_path_factory.mktemp("qwen35")
    out = folder / "tiny-qwen35.gguf"
    convert_checkpoint(make_qwen35(folder / "hf"), out)
    return out


def sampled_text(path: Path, seed: int | None) -> str:
    model = load_model(str(path), context=1024, seed=seed)
    try:
        request = GenerationRequest(messages=[ChatMessage(role="user", content="Write a short poem about frogs.")],
                                    tools=[], max_tokens=24)
        return "".join(c.text for c in model.generate(request) if isinstance(c, TextChunk))
    finally:
        model.close()


@pytest.mark.parametrize("which", ["embedded", "tiny qwen35"])
def test_each_sample_seed_reaches_llama_cpp(which: str, tiny_qwen35: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # saved prompt states stay out of the way
    path = embedded_model_path() if which == "embedded" else tiny_qwen35
    first, second = sampled_text(path, seed_for(1)), sampled_text(path, seed_for(2))
    assert first and second
    assert first != second  # another sample, another draw
    assert sampled_text(path, seed_for(2)) == second  # and each sample is reproducible


def test_an_eval_job_with_samples_on_the_embedded_gguf(tmp_path: Path, task_set: Path) -> None:
    (task, _) = load_tasks(task_set)
    out = tmp_path / "out"
    limits = Limits(max_steps=1, turn_tokens=24, context=4096)
    outcome = EvalRun([task], ["default"], EvalConfig(out=out, limits=limits, samples=2)).run()
    assert [r.sample for r in outcome.results] == [1, 2]
    assert all(r.outcome in ("no_patch", "limit", "tests_fail") for r in outcome.results), [r.message for r in outcome.results]
    assert all(r.evaluated_tokens > 500 and 0 < r.completion_tokens <= 24 for r in outcome.results)
    said = []
    for name in ("calc-one.jsonl", "calc-one@2.jsonl"):
        events = [json.loads(line) for line in next((out / "transcripts").rglob(name)).read_text().splitlines()]
        said.append([e["message"] for e in events if e["type"] == "message" and e["message"]["role"] == "assistant"])
        assert [e["type"] for e in events if e["type"] == "usage"] == ["usage"]
    assert said[0] and said[1] and said[0] != said[1]
