"""Recorded sessions through a real llama.cpp model: each assistant turn is forced token by token (evaluated
one at a time like sampled ones) and ends where the recording does; every turn's engine counts are kept, so
a test can tell what was evaluated from what the token stream gained."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from models.base import Chunk, GenerationRequest, TurnEnd
from models.llama_backend import LlamaCppModel


def json_call(name: str, **arguments: object) -> str:
    """A tool call as the plain-JSON dialect (the embedded SmolLM2) writes it."""
    return json.dumps({"tool": name, "arguments": arguments})


@dataclass
class TurnCount:
    evaluated: int  # tokens run through llama.cpp during the turn (prompt and forced output)
    appended: int  # what the token stream gained (from what was restored, if a snapshot was)
    restored: bool  # the turn started from a saved state (a new conversation: after a compaction)
    stream: int  # the stream's length after the turn


@dataclass
class ForcedTurns:
    """A ChatModel over a LlamaCppModel that 'writes' the recorded turns (the last one: `final`)."""

    model: LlamaCppModel
    turns: list[str]
    final: str = "Done."
    position: int = 0
    counts: list[TurnCount] = field(default_factory=list)

    @property
    def info(self):  # type: ignore[no-untyped-def]
        return self.model.info

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        text = self.turns[self.position] if self.position < len(self.turns) else self.final
        self.position += 1
        model = self.model
        stats = model.stats
        n0, e0, r0 = model.llm.n_tokens, stats.evaluated, stats.restored
        model.response_prefix = text
        forced = len(model._tokenize(text))  # noqa: SLF001
        try:
            for chunk in model.generate(dataclasses.replace(request, max_tokens=forced)):
                if isinstance(chunk, TurnEnd) and chunk.finish_reason == "length":
                    chunk = dataclasses.replace(chunk, finish_reason="stop")  # the recording ends here
                yield chunk
        finally:
            model.response_prefix = ""
        restored = stats.restored - r0
        start = restored if restored else n0
        self.counts.append(TurnCount(
            evaluated=stats.evaluated - e0, appended=model.llm.n_tokens - start, restored=restored > 0,
            stream=model.llm.n_tokens,
        ))

    def context_used(self) -> int:
        return self.model.context_used()

    def prompt_tokens(self, messages, tools) -> int:  # type: ignore[no-untyped-def]
        return self.model.prompt_tokens(messages, tools)

    # Saved points (models.saved_points) are the model's own.
    def state_identity(self) -> str:
        return self.model.state_identity()

    def save_point(self, path):  # type: ignore[no-untyped-def]
        return self.model.save_point(path)

    def load_point(self, path, messages):  # type: ignore[no-untyped-def]
        return self.model.load_point(path, messages)

    def close(self) -> None:
        pass

    def segments(self) -> list[list[TurnCount]]:
        """The turns between two restarts from a saved state (compactions)."""
        out: list[list[TurnCount]] = []
        for count in self.counts:
            if count.restored or not out:
                out.append([])
            out[-1].append(count)
        return out


def ratio(counts: list[TurnCount]) -> float:
    """Tokens evaluated / tokens appended: 1.00 when nothing is ever read twice."""
    appended = sum(c.appended for c in counts)
    return sum(c.evaluated for c in counts) / appended if appended else 0.0
