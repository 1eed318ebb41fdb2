"""The one narrow interface between the agent loop and any model backend.

A backend turns a conversation into a stream of chunks. Backends that keep state (llama.cpp) are told
the whole conversation each turn and work out themselves what is new — the agent never has to know
about token caches.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from models.chat import ChatMessage, ToolCall, ToolSpec

# How the model writes tool calls: a name in models.dialects.DIALECTS, chosen from the chat template, or
# "native" for backends that parse calls themselves. A plain str, so a new dialect is one module.
Dialect = str
FinishReason = Literal["stop", "length", "context", "cancelled"]


# Where no tokenizer is at hand (replay, a server's request, the loop's budgets): characters per token.
CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Tokens `text` takes, estimated from its length (the one estimate every layer uses)."""
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def cache_folder(name: str) -> Path:
    """ribbit's cache folder NAME: `$XDG_CACHE_HOME/ribbit/NAME` (saved prompt states, the embedded model's copy)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser()
    if not base.is_absolute():  # the XDG spec: relative values are ignored (else caches land in the repo)
        base = Path.home() / ".cache"
    return base / "ribbit" / name


class ModelCheck(BaseModel):
    """One line of `ribbit doctor` about models."""

    name: str
    ok: bool
    detail: str


class ModelError(Exception):
    """A model that cannot load or run; its message is one line meant for the user."""


class ContextFull(ModelError):
    """The conversation no longer fits the context window."""


class ReasoningSwitch(BaseModel):
    """How a model's reasoning is turned on and off per turn (`--reasoning`, `/think`)."""

    # "template": the GGUF's chat template reads `enable_thinking`, which ribbit sets when it renders;
    # "server": sent as `chat_template_kwargs.enable_thinking` for the server's template, which may ignore it.
    via: Literal["template", "server"]
    # What the model does when not told (None: the server decides).
    default_on: bool | None = True
    # Whether the generation prompt ends inside an open `<think>` block with reasoning on / off.
    opens_when_on: bool = False
    opens_when_off: bool = False


class ModelInfo(BaseModel):
    name: str
    path: str | None = None
    quantization: str | None = None
    architecture: str | None = None
    dialect: Dialect = "json"
    context_length: int = 8192  # the largest context: compaction triggers there
    # In-process backends whose context grows with the conversation: the tokens allocated now (None: all
    # of context_length).
    context_allocated: int | None = None
    # Backends that parse tool calls themselves (OpenAI-compatible servers) set this.
    native_tools: bool = False
    # The generation prompt already opened a reasoning block (`<think>\n`), so output starts inside it.
    opens_reasoning: bool = False
    # In-process backends: llama.cpp's thread count (short, for the status bar) and why; draft sources.
    threads: str | None = None
    threads_reason: str | None = None
    drafting: str | None = None
    # What the model keeps resident in this process (in-process backends: the memory plan's total); the
    # sandbox's default memory cap for commands leaves it its room.
    memory_bytes: int = 0
    # Prompt tokens/s this backend measured on this machine (None until a long enough prompt was read).
    prompt_tokens_per_s: float | None = None
    # None: the model has no reasoning switch (it reasons, or not, as its template says).
    reasoning: ReasoningSwitch | None = None

    def opens_reasoning_for(self, reasoning: bool | None) -> bool:
        """Whether a turn's output starts inside `<think>` with reasoning set on / off (None: default)."""
        if reasoning is None or self.reasoning is None or self.reasoning.via != "template":
            return self.opens_reasoning
        return self.reasoning.opens_when_on if reasoning else self.reasoning.opens_when_off


class Usage(BaseModel):
    """One assistant turn's token accounting (docs/contract.md `usage` event)."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    evaluated_tokens: int = 0
    completion_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    # What the server says the turn cost (hosted endpoints that report it), else None.
    cost: float | None = None


@dataclass(frozen=True)
class TextChunk:
    text: str


@dataclass(frozen=True)
class PrefillProgress:
    done: int
    total: int


@dataclass(frozen=True)
class TurnEnd:
    finish_reason: FinishReason
    usage: Usage
    # Only for backends whose server already parsed the calls (native_tools).
    tool_calls: list[ToolCall] | None = None
    reasoning: str | None = None
    content: str | None = None


@dataclass(frozen=True)
class ContextGrown:
    """The backend made its context larger to fit the conversation (its state moved over, nothing re-read)."""

    before: int
    after: int
    seconds: float


Chunk = TextChunk | PrefillProgress | ContextGrown | TurnEnd


@dataclass
class GenerationRequest:
    messages: Sequence[ChatMessage]
    tools: Sequence[ToolSpec]
    max_tokens: int = 8192
    # Reasoning on / off for this turn (None: the model's default); ignored by models without a switch.
    reasoning: bool | None = None
    # Polled between tokens (and between prompt batches); True stops the turn cleanly.
    should_stop: Callable[[], bool] = field(default=lambda: False)

    def cut_off(self, produced: int) -> FinishReason | None:
        """Why a turn that has written `produced` tokens ends before the model ends it, or None to go on."""
        if self.should_stop():
            return "cancelled"
        if produced >= self.max_tokens:
            return "length"
        return None


@runtime_checkable
class ChatModel(Protocol):
    info: ModelInfo

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        """Stream one assistant turn; the last chunk is always a TurnEnd."""
        ...

    def context_used(self) -> int:
        """Tokens the conversation occupies in the model's context after the last turn."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Preloading(Protocol):
    """A backend that can read the conversation so far before the next task arrives: the system prompt
    (llama.cpp: its tokens evaluated, or its saved state loaded), or a resumed conversation whose saved
    state could not be loaded; later turns find it already read."""

    def preload(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> Iterator[PrefillProgress]:
        """Progress after each batch read. Stopped early, the next turn starts over from the last saved
        prefix (the system prompt) and reads the rest."""
        ...
