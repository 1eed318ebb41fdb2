"""Events the agent emits. The TUI, `ribbit run` and the transcript writer all consume the same stream.

Transcript events (docs/contract.md) are `message`, `usage`, `approval`, `external_change`, `compaction`,
`summary`, and ribbit's `context`; the rest are for live display only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from models.base import ContextGrown
from models.chat import ChatMessage, ToolCall

StopReason = Literal["finished", "max_steps", "context", "turn_tokens", "error", "interrupted"]


class MessageEvent(BaseModel):
    type: Literal["message"] = "message"
    message: ChatMessage

    def transcript(self) -> dict[str, Any]:
        return {"type": "message", "message": self.message.to_openai()}


class UsageEvent(BaseModel):
    type: Literal["usage"] = "usage"
    step: int
    prompt_tokens: int
    cached_tokens: int
    evaluated_tokens: int
    completion_tokens: int
    prefill_s: float
    decode_s: float
    # What the server says the turn cost, where it reports it (hosted openai: endpoints); else null.
    cost: float | None = None


class ApprovalEvent(BaseModel):
    type: Literal["approval"] = "approval"
    tool_call_id: str
    decision: Literal["approved", "rejected"]
    reason: str | None = None


class ExternalChangeEvent(BaseModel):
    type: Literal["external_change"] = "external_change"
    paths: list[str]


class CompactionEvent(BaseModel):
    """The conversation was summarised to fit the context (agent.core.compaction): prompt tokens before and after."""

    type: Literal["compaction"] = "compaction"
    before_tokens: int
    after_tokens: int
    # Beyond the contract's two counts: why ("auto": the next turn would not fit with room for a summary,
    # "overflow": a turn ran out of room, "manual": /compact) and the summary that replaced the conversation.
    trigger: str = "auto"
    summary: str = ""


class ContextEvent(BaseModel):
    """The model's context grew to fit the conversation (its state moved into a larger one, nothing re-read):
    `{"type": "context", "from": N, "to": M, "seconds": S}`."""

    model_config = ConfigDict(populate_by_name=True)

    type: Literal["context"] = "context"
    before: int = Field(alias="from")
    to: int
    seconds: float


def context_event(grown: ContextGrown) -> ContextEvent:
    return ContextEvent(before=grown.before, to=grown.after, seconds=round(grown.seconds, 3))


class SummaryEvent(BaseModel):
    type: Literal["summary"] = "summary"
    steps: int
    stop_reason: StopReason
    files_changed: list[str]
    # Not in the transcript contract's required keys, but useful to every consumer.
    message: str | None = None


# --- live-only events -------------------------------------------------------------------------


class TextDelta(BaseModel):
    type: Literal["text_delta"] = "text_delta"
    text: str


class ReasoningDelta(BaseModel):
    type: Literal["reasoning_delta"] = "reasoning_delta"
    text: str


class PrefillEvent(BaseModel):
    """The model is reading its prompt: `done` of `total` new tokens evaluated."""

    type: Literal["prefill"] = "prefill"
    done: int
    total: int


class WritingProgress(BaseModel):
    """The model is writing: `tokens` so far in this turn (or compaction summary), `context` tokens in the
    context now (its prompt and what it wrote); live only, a few times a second at most."""

    type: Literal["writing"] = "writing"
    tokens: int
    context: int
    limit: int
    purpose: Literal["turn", "summary"] = "turn"


class TurnStarted(BaseModel):
    type: Literal["turn_started"] = "turn_started"
    step: int


class ToolCallEvent(BaseModel):
    type: Literal["tool_call"] = "tool_call"
    call: ToolCall


class ToolResultEvent(BaseModel):
    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    name: str
    output: str
    is_error: bool


class NoticeEvent(BaseModel):
    """Something the user should see that is not part of the conversation (warnings, parse errors)."""

    type: Literal["notice"] = "notice"
    level: Literal["info", "warning", "error"] = "info"
    text: str


class ModeChanged(BaseModel):
    """The approval mode changed (the user's /mode, or 'approve all' during a review); live only."""

    type: Literal["mode_changed"] = "mode_changed"
    mode: str


AgentEvent = (
    MessageEvent
    | UsageEvent
    | ApprovalEvent
    | ExternalChangeEvent
    | CompactionEvent
    | ContextEvent
    | SummaryEvent
    | TextDelta
    | ReasoningDelta
    | PrefillEvent
    | WritingProgress
    | TurnStarted
    | ToolCallEvent
    | ToolResultEvent
    | NoticeEvent
    | ModeChanged
)

EventSink = Callable[[AgentEvent], None]

TRANSCRIPT_TYPES = frozenset({"message", "usage", "approval", "external_change", "compaction", "context", "summary"})


def transcript_record(event: AgentEvent) -> dict[str, Any] | None:
    """The JSON Lines record for a transcript event, or None for live-only events."""
    if event.type not in TRANSCRIPT_TYPES:
        return None
    if isinstance(event, MessageEvent):
        return event.transcript()
    return event.model_dump(exclude_none=False, by_alias=True)


class StopRun(Exception):
    """Ends run() with a stop reason; the message says why, for the user."""

    def __init__(self, reason: StopReason, message: str) -> None:
        super().__init__(message)
        self.reason: StopReason = reason
        self.message = message
