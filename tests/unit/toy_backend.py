"""A model backend, as a newcomer would add it: this module, and one entry in models.backends.BACKENDS
(the test puts it there). `echo:TEXT` answers every turn with TEXT; nothing runs in ribbit's process."""

from __future__ import annotations

from collections.abc import Iterator

from models.backends import SPEC_CHECK, Backend, EngineOptions
from models.base import ChatModel, Chunk, GenerationRequest, ModelCheck, ModelInfo, TextChunk, TurnEnd, Usage


class EchoModel:
    def __init__(self, text: str) -> None:
        self.text = text
        self.info = ModelInfo(name=f"echo {text[:20]}", dialect="qwen3_coder", context_length=1 << 20)

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        yield TextChunk(self.text)
        yield TurnEnd(finish_reason="stop", usage=Usage(prompt_tokens=1, completion_tokens=1))

    def context_used(self) -> int:
        return 0

    def close(self) -> None:
        pass


class EchoBackend(Backend):
    prefix = "echo:"
    form = "echo:TEXT"

    def load(self, spec: str, *, context: int, engine: EngineOptions, seed: int | None, replay_delay: float) -> ChatModel:
        return EchoModel(spec[len(self.prefix):])

    def label(self, spec: str) -> str:
        return "echo"

    def spec_check(self, spec: str, origin: str) -> ModelCheck:
        return ModelCheck(name=SPEC_CHECK, ok=True, detail=f"{spec}{origin}: answers with its own text")

    def checks(self, spec: str) -> list[ModelCheck]:
        return [ModelCheck(name="echo", ok=True, detail="nothing to reach")]
