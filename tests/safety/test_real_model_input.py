"""Hole 8 through the real llama.cpp path: what the conversation keeps is tokenized again.

A file name that is not UTF-8 reaches a tool result as lone surrogates (Python's surrogateescape);
the llama.cpp backend encodes every message to UTF-8 for its tokenizer, where a lone surrogate
raised UnicodeEncodeError and ended the session. Here the embedded GGUF reads such a result."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from agent.core.approvals import RejectAll
from agent.session.workspace import open_workspace
from agent.core.loop import Limits
from models.base import Chunk, GenerationRequest, TextChunk, TurnEnd, Usage
from models.embedded import embedded_model_path
from models.llama_backend import LlamaCppModel
from tests.safety.helpers import Recorder


class FirstTurnScripted:
    """The real model, except that its first turn is given (the call we want it to make)."""

    def __init__(self, model: LlamaCppModel, first: str) -> None:
        self.model, self.first, self.info = model, first, model.info
        self.turns = 0

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        self.turns += 1
        if self.turns == 1:
            yield TextChunk(self.first)
            yield TurnEnd(finish_reason="stop", usage=Usage(prompt_tokens=0, completion_tokens=1))
            return
        yield from self.model.generate(request)

    def context_used(self) -> int:
        return self.model.context_used()

    def close(self) -> None:
        self.model.close()


def test_a_tool_result_naming_a_non_utf8_file_reaches_the_embedded_model(repo: Path, tmp_path: Path) -> None:
    (repo / "x\udcff.txt").write_bytes(b"x\n")  # the name's byte 0xff is not UTF-8
    llama = LlamaCppModel(embedded_model_path(), n_ctx=2048, temperature=0.0, state_dir=tmp_path / "states")
    model = FirstTurnScripted(llama, '{"tool": "Glob", "arguments": {"pattern": "*.txt"}}')
    recorder = Recorder()
    workspace = open_workspace(
        model, repo, mode="full-auto", approver=RejectAll(), sink=recorder,  # type: ignore[arg-type]
        limits=Limits(max_steps=2, turn_tokens=4, context=2048), watch=False,
    )
    try:
        summary = workspace.session.run("list the text files")
    finally:
        workspace.close()
        model.close()
    assert summary.stop_reason != "error", summary.message
    result = next(m.content for m in workspace.session.messages if m.role == "tool")
    assert result == "x\ufffd.txt"
    second = [e for e in recorder.of_type("usage") if e.step == 2]  # type: ignore[attr-defined]
    assert second and second[0].evaluated_tokens > 0  # llama.cpp read the whole conversation, result included
