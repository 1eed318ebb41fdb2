"""Compaction: when the next turn would not fit the context, the model summarises the work so far and the
conversation restarts from the system prompt + the task + that summary + the latest tool results.

Built for small windows (8K-32K) and a hybrid model that cannot re-read cheaply:
- the summary is written at the end of the live token stream (nothing is read again to write it), so room
  for it is kept in reserve: compaction starts while the summary request and the summary still fit;
- the restart is the saved system-prompt state plus one new message (backend: models.llama_backend);
- the reserve scales with the window (a fixed one eats a small window whole: opencode#45368);
- a run compacts at most MAX_COMPACTIONS_PER_RUN times, then ends with stop reason "context".
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from agent.core.events import CompactionEvent, EventSink, MessageEvent, NoticeEvent, StopRun
from agent.core.repeats import Repetition, RepetitionGuard
from agent.text import valid_unicode
from models.base import CHARS_PER_TOKEN, ChatModel, ContextFull, GenerationRequest, ModelError, TurnEnd, estimate_tokens
from models.chat import ChatMessage, ToolSpec

MAX_COMPACTIONS_PER_RUN = 3
# Tokens the summary request itself takes (its text and the turn markup), rounded up.
SUMMARY_REQUEST_TOKENS = 200
# Tool calls listed in the summary ribbit writes itself when the model cannot write one.
FALLBACK_CALLS = 12

SUMMARY_REQUEST = """ribbit: the context window is nearly full. Stop working on the task for this one reply \
and make no tool call. Write a summary that will replace this conversation, in at most {words} words:
- Files: each file you read or changed, and what you changed in it (exact names).
- Decisions: what you found out and decided, and why.
- State: what is done and verified, and the next steps that remain to finish the task.
Write only the summary.{focus}"""

RESTART = """{task}

(ribbit: the conversation was summarised to fit the context window; the summary below replaces it. \
Go on with the task from where the summary leaves off.)

{summary}"""

IDLE_RESTART = """(ribbit: the conversation so far was summarised to fit the context window; the summary \
below replaces it. Wait for the next task.)

{summary}"""


def clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


@dataclass(frozen=True)
class ContextBudget:
    """How a window is shared, in tokens: `base` is what every conversation starts with (the system
    prompt and tools), `request` what asking for a summary adds. The rest is shared between the
    conversation, room for the next turn and room for a summary written in place (models.llama_backend
    keeps the stream append-only, so a summary can only be written at its end)."""

    window: int
    base: int = 0
    request: int = SUMMARY_REQUEST_TOKENS

    @property
    def free(self) -> int:
        return max(0, self.window - self.base)

    @property
    def summary_tokens(self) -> int:
        """The longest summary asked for: an eighth of the free window, at most 2,048 (about 370 tokens in
        FrogNano's 4K, 2,048 in 32K): each one costs a decode step, ~0.1 s on a 2-core laptop."""
        return clamp(self.free // 8, 96, 2048)

    @property
    def turn_reserve(self) -> int:
        """Room a turn is sure to have: a sixth of the free window (at most 8,192, the evaluated turn cap)."""
        return clamp(self.free // 6, 96, 8192)

    @property
    def summary_reserve(self) -> int:
        """What must stay free at the end of the stream for a summary written in place."""
        return self.request + self.summary_tokens

    @property
    def results_tokens(self) -> int:
        """The latest tool results kept after a compaction: an eighth of the free window, at most 8,192
        (they are read again: ~30 ms a token at real size)."""
        return clamp(self.free // 8, 128, 8192)

    def worthwhile(self, next_prompt: int) -> bool:
        """Whether a compaction would free room: the conversation beyond the system prompt is larger than
        what one keeps (a summary, the latest results) plus a turn. In a window the system prompt nearly
        fills, turns simply use what room there is, and the context limit ends the run as before."""
        return next_prompt - self.base > self.summary_tokens + self.results_tokens + self.turn_reserve

    def due(self, next_prompt: int) -> bool:
        """Whether the next turn should come after a compaction: it would not keep room for one."""
        return next_prompt + self.summary_reserve + self.turn_reserve > self.window

    def turn_limit(self, next_prompt: int, turn_tokens: int) -> int:
        """Tokens the next turn may write and still leave room for a summary after it."""
        return max(1, min(turn_tokens, self.window - next_prompt - self.summary_reserve))


@runtime_checkable
class CountsPromptTokens(Protocol):
    """Backends that can say exactly how long the next prompt is (llama.cpp) without evaluating it."""

    def prompt_tokens(self, messages: list[ChatMessage], tools: list[ToolSpec]) -> int: ...


def next_prompt_tokens(model: ChatModel, messages: list[ChatMessage], tools: list[ToolSpec], fresh: bool = False) -> int:
    """Tokens the next turn's prompt will hold: exact where the backend counts, else an estimate of what
    is new since its last turn on top of what it holds (`fresh`: of all of it)."""
    if isinstance(model, CountsPromptTokens):
        return model.prompt_tokens(messages, tools)
    last_turn = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    if last_turn < 0 or fresh:
        return sum(estimate_tokens(m.content) + 8 for m in messages)
    return model.context_used() + sum(estimate_tokens(m.content) + 8 for m in messages[last_turn + 1 :])


def cut_to_tokens(text: str, tokens: int) -> str:
    """Head and tail of `text` within about `tokens`, saying how much was left out."""
    limit = max(64, tokens * CHARS_PER_TOKEN)
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 2 // 3], text[-(limit // 3) :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters cut by ribbit's compaction ...]\n{tail}"


def latest_results(messages: list[ChatMessage], budget: int) -> list[ChatMessage]:
    """The last assistant turn with tool calls and the results answering it, if the conversation ends with
    them; each result cut to its share of `budget` tokens."""
    end = len(messages)
    start = end
    while start > 0 and messages[start - 1].role == "tool":
        start -= 1
    if start == end or start == 0 or not messages[start - 1].tool_calls:
        return []
    call_turn = messages[start - 1]
    results = messages[start:end]
    share = max(64, budget // len(results))
    kept = [call_turn.model_copy(update={"content": "", "reasoning_content": None})]
    kept += [m.model_copy(update={"content": cut_to_tokens(m.content, share)}) for m in results]
    return kept


class _Window(Protocol):
    @property
    def context(self) -> int: ...


class _Changed(Protocol):
    @property
    def files_changed(self) -> Collection[str]: ...


class CompactedSession(Protocol):
    """What compaction needs of the session it compacts (agent.core.loop.AgentSession)."""

    @property
    def model(self) -> ChatModel: ...
    @property
    def messages(self) -> list[ChatMessage]: ...
    @property
    def specs(self) -> list[ToolSpec]: ...
    @property
    def limits(self) -> _Window: ...
    @property
    def changes(self) -> _Changed: ...
    @property
    def sink(self) -> EventSink: ...

    def stream(
        self, request: GenerationRequest, prompt_tokens: int, on_text: Callable[[str], None] = ...,
        purpose: Literal["turn", "summary"] = ..., guard: RepetitionGuard | None = ...,
    ) -> tuple[str, TurnEnd, Repetition | None]: ...

    def report_usage(self, end: TurnEnd) -> None: ...

    def parse_text(self, text: str, opens_reasoning: bool) -> str: ...


def fallback_summary(session: CompactedSession) -> str:
    """What ribbit itself knows when the model cannot write a summary (the stream had no room left)."""
    calls = [c for m in session.messages if m.tool_calls for c in m.tool_calls][-FALLBACK_CALLS:]
    changed = sorted(session.changes.files_changed)
    lines = ["Summary by ribbit (the model could not write one: its context was full)."]
    lines.append("Files changed so far: " + (", ".join(changed) if changed else "none") + ".")
    if calls:
        lines.append("Latest tool calls, oldest first:")
        for call in calls:
            args = ", ".join(f"{k}={str(v)[:80]!r}" for k, v in call.arguments.items())
            lines.append(f"- {call.name}({args})")
    return "\n".join(lines)


class Compactor:
    """Decides when a session compacts and carries it out; one per AgentSession."""

    def __init__(self, session: CompactedSession) -> None:
        self.session = session
        self.in_run = 0  # compactions in the current run
        self._measured_for: tuple[int, str] | None = None
        self._measured = (0, SUMMARY_REQUEST_TOKENS)

    @property
    def budget(self) -> ContextBudget:
        s = self.session
        model, system = s.model, s.messages[0]
        key = (id(model), system.content)
        if self._measured_for != key:  # measured once per model and system prompt
            # (Some templates refuse a conversation without a user turn: a one-character one stands in.)
            user = ChatMessage(role="user", content=".")
            request = ChatMessage(role="user", content=SUMMARY_REQUEST.format(words=999, focus=""))
            try:
                base = next_prompt_tokens(model, [system, user], s.specs, fresh=True)
                with_request = next_prompt_tokens(model, [system, user, request], s.specs, fresh=True)
                self._measured = (base, with_request - base)
            except ModelError:
                self._measured = (estimate_tokens(system.content), SUMMARY_REQUEST_TOKENS)
            self._measured_for = key
        base, request_tokens = self._measured
        return ContextBudget(window=min(s.limits.context, model.info.context_length), base=base, request=request_tokens + 16)

    def next_prompt(self) -> int:
        s = self.session
        return next_prompt_tokens(s.model, s.messages, s.specs)

    def start_run(self) -> None:
        self.in_run = 0

    def compact(self, *, trigger: str, focus: str = "", task: str | None = None) -> CompactionEvent:
        """Summarise and restart the conversation. `task`: the run's task (None between runs).

        Raises ContextFull (one line) when the run already compacted MAX_COMPACTIONS_PER_RUN times or the
        compacted conversation still does not fit."""
        s = self.session
        if task is not None and self.in_run >= MAX_COMPACTIONS_PER_RUN:
            raise ContextFull(
                f"the context filled again after {MAX_COMPACTIONS_PER_RUN} compactions in this task; "
                f"give it a larger --context or split the task"
            )
        before = max(self.next_prompt(), s.model.context_used())  # the conversation as the next turn would read it
        s.sink(NoticeEvent(level="info", text=f"compacting the conversation ({trigger}): the model writes a summary"))
        summary = self._model_summary(focus) or fallback_summary(s)
        kept = latest_results(s.messages, self.budget.results_tokens) if task is not None else []
        text = RESTART.format(task=task, summary=summary) if task is not None else IDLE_RESTART.format(summary=summary)
        restart = ChatMessage(role="user", content=valid_unicode(text))
        s.messages[:] = [s.messages[0], restart, *kept]
        after = self.next_prompt()
        if task is not None:
            self.in_run += 1
        event = CompactionEvent(before_tokens=before, after_tokens=after, trigger=trigger, summary=summary)
        s.sink(event)
        for message in s.messages[1:]:  # in the transcript, the new conversation follows its compaction event
            s.sink(MessageEvent(message=message))
        if self.budget.due(after) and task is not None:
            raise ContextFull(
                f"even the compacted conversation ({after} tokens) leaves no room for a turn in the "
                f"{self.budget.window}-token context"
            )
        return event

    def _model_summary(self, focus: str) -> str:
        """The model's own summary, written at the end of the live stream; '' when it cannot write one."""
        s = self.session
        budget = self.budget
        words = max(60, budget.summary_tokens * 2 // 3)
        request_text = SUMMARY_REQUEST.format(words=words, focus=f"\nFocus on: {focus}" if focus.strip() else "")
        messages = [*s.messages, ChatMessage(role="user", content=request_text)]
        room = budget.window - next_prompt_tokens(s.model, messages, s.specs)
        if room < 64:
            return ""
        request = GenerationRequest(
            messages=messages, tools=s.specs, max_tokens=min(budget.summary_tokens, room - 1), reasoning=False,
        )
        try:
            text, end, repetition = s.stream(request, budget.window - room, purpose="summary")
        except ModelError:
            return ""
        s.report_usage(end)
        if end.finish_reason == "cancelled" and repetition is None:
            raise StopRun("interrupted", "stopped by the user while the model summarised")
        if repetition is not None:  # a summary that went round in circles: what came before the loop
            text = text[: repetition.keep_chars]
        parsed = s.parse_text(text, opens_reasoning=s.model.info.opens_reasoning_for(False))
        return parsed.strip()
