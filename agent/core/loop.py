"""The agent loop: run() repeats step() = query() + execute() until the model stops calling tools.

It knows nothing about the TUI or llama.cpp: it talks to a ChatModel, emits events to a sink, and
asks an Approver. Limits and interruption are exceptions carrying their stop reason.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ValidationError

from agent.core.approvals import ApprovalOrchestrator, ApprovalPolicy, Approver
from agent.core.tools.changes import AgentWriteObserver, ChangeGate
from agent.core.compaction import Compactor
from agent.core.crashlog import describe, one_line
from agent.core.events import (
    CompactionEvent,
    context_event,
    EventSink,
    MessageEvent,
    NoticeEvent,
    PrefillEvent,
    ReasoningDelta,
    StopReason,
    StopRun,
    SummaryEvent,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
    TurnStarted,
    UsageEvent,
    WritingProgress,
)
from agent.core.instructions import MAX_TOTAL_BYTES, ProjectInstructions, load_instructions
from agent.core.output_budget import OutputBudget, budget_for, model_token_counter
from agent.core.prompt import system_prompt
from agent.core.tools.readstate import ReadState
from agent.core.repeats import RepeatDetector, Repetition, RepetitionGuard
from agent.sandbox.runner import CommandRunner
from agent.sandbox.output_spool import SavedOutputs
from agent.core.screening import screened
from agent.core.stream import StreamSplitter
from agent.core.tools import Tool, ToolContext, ToolError, default_tools
from agent.core.tools.base import ShellState
from agent.text import valid_unicode
from models.base import (
    ChatModel,
    ContextFull,
    ContextGrown,
    GenerationRequest,
    ModelError,
    ModelInfo,
    Preloading,
    PrefillProgress,
    TextChunk,
    TurnEnd,
    estimate_tokens,
)
from models.chat import ChatMessage, ParsedTurn, ToolCall
from models.dialects import dialect_named, parser_for

MAX_MALFORMED_IN_ROW = 3
MAX_REPETITIONS_IN_ROW = 3  # turns in a row cut because the model repeated itself: then the run ends
PROGRESS_EVERY = 8  # chunks between WritingProgress events (the status bar's context gauge)
REPETITION_NOTE = (
    "ribbit: your last reply was cut after {tokens} tokens because it repeated the same text {copies} times "
    "(\"{unit}\"). Do not write it again. Go on with the task another way: call one tool, or give your final "
    "answer in a few sentences."
)


class Limits(BaseModel):
    max_steps: int = 150
    context: int = 131_072
    turn_tokens: int = 8192
    # Tokens one tool result may take (--tool-output-tokens); None: sized by the model's prompt speed.
    tool_output_tokens: int | None = None


@dataclass
class Turn:
    text: str
    end: TurnEnd
    # Set when ribbit ended the turn because the model was repeating itself (agent.core.repeats).
    repetition: Repetition | None = None


def format_validation_error(tool: str, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        problems.append(f"{where}: {err['msg']}")
    return f"invalid arguments for {tool}: " + "; ".join(problems)


def no_reasoning_switch(info: ModelInfo) -> str:
    """What the user is told when they set reasoning on a model that cannot switch it."""
    does = "it always reasons" if info.opens_reasoning else "it reasons, or not, as its template says"
    return f"{info.name} has no reasoning switch (its chat template does not read enable_thinking); {does}"


class Notes:
    """Short notes for the model's next turn (e.g. files changed outside the agent); any thread."""

    def __init__(self) -> None:
        self._notes: list[str] = []
        self._lock = threading.Lock()

    def add(self, text: str) -> None:
        with self._lock:
            self._notes.append(text)

    def take(self) -> str:
        """All notes so far, one a line, and forget them."""
        with self._lock:
            notes, self._notes = self._notes, []
        return "\n".join(notes)


class AgentSession:
    def __init__(
        self,
        model: ChatModel,
        root: Path,
        *,
        policy: ApprovalPolicy,
        approver: Approver,
        runner: CommandRunner,
        sink: EventSink,
        limits: Limits | None = None,
        read_state: ReadState | None = None,
        write_observer: AgentWriteObserver | None = None,
        after_step: Callable[[int, list[ToolCall]], None] | None = None,
        reasoning: bool | None = None,
        instructions: ProjectInstructions | None = None,
        notes: Notes | None = None,
        outputs: SavedOutputs | None = None,
    ) -> None:
        self.model = model
        self.root = root.resolve()
        self.limits = limits or Limits()
        self.sink = sink
        self.tools: dict[str, Tool] = default_tools()
        self.specs = [t.spec() for t in self.tools.values()]
        self.parser = parser_for(model.info.dialect, self.specs)
        self.read_state = read_state or ReadState()
        self.approvals = ApprovalOrchestrator(policy, approver, sink)
        self.changes = ChangeGate(
            root=self.root, approvals=self.approvals, read_state=self.read_state,
            observer=write_observer,
        )
        self.cancel_event = threading.Event()
        # Held while the model is in use (a run, a preload, a compaction, a rewind): a run waits for a
        # preload, which reads what it needs. Re-entrant: a run compacts from inside.
        self._model_lock = threading.RLock()
        self._cancels = 0  # cancel() calls so far: a run that waited for a preload knows it was stopped
        # Shared by every call; the loop gives each call its own copy naming it (ToolContext.for_call).
        self.tool_context = ToolContext(
            root=self.root, read_state=self.read_state, changes=self.changes, runner=runner,
            approvals=self.approvals, shell=ShellState(cwd=self.root), cancel=self.cancel_event,
            outputs=outputs,
        )
        self.after_step = after_step or (lambda step, calls: None)
        # Called with each task before it joins the conversation (saved sessions mark rewind points).
        self.before_task: Callable[[str], None] = lambda task: None
        self.messages: list[ChatMessage] = []
        self.steps = 0
        self.total_steps = 0
        self._malformed_in_row = 0
        self._repetitions_in_row = 0
        self._repeats = RepeatDetector()
        self._budget: OutputBudget | None = None  # set per step by execute()
        self._opens_reasoning = model.info.opens_reasoning
        self.notes = notes or Notes()
        # Reasoning on / off for the next turns (None: the model's default); see set_reasoning().
        self.reasoning = reasoning
        # AGENTS.md & co., read once: what the agent writes to them later applies from the next session.
        self.instructions = instructions if instructions is not None else load_instructions(
            self.root, max_total=min(MAX_TOTAL_BYTES, self.limits.context // 4))  # never more than 1/4 of it
        # The current run's task (compaction restarts from it); None between runs.
        self.task: str | None = None
        self.compactor = Compactor(self)
        self._add(ChatMessage(role="system", content=self._system_prompt()))
        self._tell_instructions()
        self._warn_if_no_reasoning_switch()

    # -- public API -----------------------------------------------------------------------------

    def use_model(self, model: ChatModel) -> None:
        """Go on with this conversation on another model (the TUI's `/model SPEC`).

        The messages so far stay; the parser and the system prompt follow the new model's dialect.
        Call it only between runs.
        """
        self.model = model
        self.parser = parser_for(model.info.dialect, self.specs)
        self.messages[0] = ChatMessage(role="system", content=self._system_prompt())
        self._warn_if_no_reasoning_switch()

    def set_reasoning(self, on: bool | None) -> bool:
        """Reasoning on / off from the next turn (None: the model's default); any time, any thread.

        Only the next generation prompt changes, so nothing already read is read again. False when the
        model has no switch (the setting is kept, for a model switched to later)."""
        self.reasoning = on
        return self.model.info.reasoning is not None

    def reasoning_state(self) -> bool | None:
        """Whether the next turn reasons: True / False, or None when the model has no switch or the
        server decides."""
        switch = self.model.info.reasoning
        if switch is None:
            return None
        return switch.default_on if self.reasoning is None else self.reasoning

    def preload(self) -> bool:
        """Read the system prompt into the model before the first task, or a resumed conversation whose
        saved state was not loaded (the TUI calls it from a worker while the user types). A run started
        meanwhile waits for it, since it would read the same tokens; cancel() stops it. False when the
        model cannot preload or its context already holds the conversation (a task has begun)."""
        model = self.model
        if not isinstance(model, Preloading):
            return False
        with self._model_lock:
            if len(self.messages) > 1 and model.context_used():
                return False
            self.cancel_event.clear()  # an Esc from an earlier run must not stop this one
            for progress in model.preload(self.messages, self.specs):
                self.sink(PrefillEvent(done=progress.done, total=progress.total))
                if self.cancel_event.is_set():
                    break
        return True

    def run(self, task: str, context: Sequence[str] = ()) -> SummaryEvent:
        """Work on `task` until the model finishes or a limit is hit; can be called again (follow-ups).

        `context`: text the user handed over with the task (an `@file` as Read shows it, a `!command`'s
        output), in the same user message after the task: it enters the conversation once, and compaction
        restarts from the task alone (the model can Read again)."""
        asked = self._cancels
        with self._model_lock:
            return self._run(task, cancelled_while_waiting=self._cancels != asked, context=context)

    def _run(self, task: str, cancelled_while_waiting: bool, context: Sequence[str] = ()) -> SummaryEvent:
        task = valid_unicode(task)  # a task from argv or a file may carry undecodable bytes
        if not cancelled_while_waiting:  # else the Esc pressed during a preload stops this run at once
            self.cancel_event.clear()
        self.steps = 0
        self._malformed_in_row = 0
        self._repetitions_in_row = 0
        self.compactor.start_run()
        notes = self._take_notes()  # e.g. files changed outside the agent while it was idle
        # Plan mode's note goes with the task (compaction restarts from it too), not in the system prompt.
        note = self.approvals.task_note()
        self.task = task + ("\n\n" + note if note else "")
        self.before_task(task)
        handed = "".join("\n\n" + valid_unicode(block) for block in context)
        self._add(ChatMessage(role="user", content=self.task + handed + ("\n\n" + notes if notes else "")))
        reason: StopReason = "finished"
        message = "the model finished"
        try:
            while not self.step():
                pass
        except StopRun as stop:
            reason, message = stop.reason, stop.message
        except ContextFull as exc:
            reason, message = "context", str(exc)
        except ModelError as exc:
            reason, message = "error", str(exc)
        except Exception as exc:  # a bug, or input nobody foresaw: one line and a summary, never a stack
            reason, message = "error", "internal error: " + describe(exc)
        self.task = None
        if reason != "finished":
            level: Literal["warning", "error"] = "warning" if reason == "interrupted" else "error"
            self.sink(NoticeEvent(level=level, text=message))
        summary = SummaryEvent(
            steps=self.steps, stop_reason=reason, files_changed=sorted(self.changes.files_changed), message=message
        )
        self.sink(summary)
        return summary

    def answer(self, request: str, max_tokens: int) -> str:
        """One reply with no tool, to a request of ribbit's own (a commit message to draft), between runs.

        The request and the reply join the conversation like any turn (the stream stays append-only: the
        reply is written at its end, reading nothing again), so the model knows later what it wrote. A tool
        call in the reply is dropped. ModelError when the model fails; '' when stopped before a word."""
        with self._model_lock:
            self.cancel_event.clear()
            self._add(ChatMessage(role="user", content=valid_unicode(request)))
            budget = self.compactor.budget
            prompt = self.compactor.next_prompt()
            room = budget.window - prompt
            if room < 16:
                raise ContextFull("the context is full: /compact first")
            gen = GenerationRequest(messages=self.messages, tools=self.specs, max_tokens=min(max_tokens, room - 1),
                                    reasoning=False)
            text, end, _repetition = self.stream(gen, prompt)
            self.report_usage(end)
            parsed = screened(self.parser.parse(text, self.model.info.opens_reasoning_for(False)))
            self._add(ChatMessage(role="assistant", content=parsed.content, reasoning_content=parsed.reasoning))
            return parsed.content.strip()

    def cancel(self) -> None:
        """Stop the current generation or tool as soon as possible (any thread)."""
        self._cancels += 1
        self.cancel_event.set()

    def compact(self, focus: str = "", trigger: str = "manual") -> CompactionEvent:
        """Summarise the conversation so far and go on from the summary (`/compact [focus]`, or when the
        next turn would not fit). Between runs or inside one; ContextFull when it cannot help."""
        with self._model_lock:
            if self.task is None:
                self.cancel_event.clear()  # between runs: an earlier Esc must not stop this one
            return self.compactor.compact(trigger=trigger, focus=focus, task=self.task)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the model for something outside the session that replaces the conversation (a rewind):
        no run, preload or compaction starts meanwhile, and it waits for one in progress."""
        with self._model_lock:
            yield

    def forget_recent_calls(self) -> None:
        """The conversation was replaced (a rewind): repeat warnings and malformed counts start again."""
        self._repeats = RepeatDetector()
        self._malformed_in_row = 0
        self._repetitions_in_row = 0

    def add_note(self, text: str) -> None:
        """A short note for the model's next turn (e.g. files changed outside the agent); any thread."""
        self.notes.add(text)

    def clear(self) -> None:
        """A new conversation: the system prompt stays; the turns, the pending notes and the record of
        recent calls go. Call it between runs."""
        del self.messages[1:]
        self.notes.take()
        self._repeats = RepeatDetector()
        self.steps = 0
        self._malformed_in_row = 0

    # -- one step -------------------------------------------------------------------------------

    def step(self) -> bool:
        """One assistant turn and its tool calls. True when the model answered without a tool call."""
        if self.steps >= self.limits.max_steps:
            raise StopRun("max_steps", f"reached the limit of {self.limits.max_steps} steps")
        budget = self.compactor.budget
        next_prompt = self.compactor.next_prompt()
        if budget.worthwhile(next_prompt) and budget.due(next_prompt):
            self.compact(trigger="auto")
            next_prompt = self.compactor.next_prompt()
        compactable = budget.worthwhile(next_prompt)
        if self.model.context_used() >= self.limits.context:
            raise StopRun("context", f"the conversation filled the {self.limits.context}-token context")
        self.steps += 1
        self.total_steps += 1
        self.sink(TurnStarted(step=self.steps))
        # A turn may write up to the limit, but never into the room a summary needs after it.
        max_tokens = budget.turn_limit(next_prompt, self.limits.turn_tokens) if compactable else self.limits.turn_tokens
        try:
            turn = self.query(max_tokens, prompt_tokens=next_prompt)
        except ContextFull:
            if not compactable:
                raise
            self.compact(trigger="overflow")  # the prompt itself no longer fits: go on from a summary
            return False
        if turn.repetition is not None:
            self._repeated(turn, turn.repetition)
            return False
        self._repetitions_in_row = 0
        parsed = self.parse(turn)
        calls = [c.model_copy(update={"id": f"call_{self.total_steps}_{i}"}) for i, c in enumerate(parsed.tool_calls)]
        self._add(
            ChatMessage(
                role="assistant", content=parsed.content, reasoning_content=parsed.reasoning,
                tool_calls=calls or None,
            )
        )
        finish = turn.end.finish_reason
        if finish == "cancelled":
            raise StopRun("interrupted", "stopped by the user")
        if compactable and (finish == "context" or (finish == "length" and max_tokens < self.limits.turn_tokens)):
            # Cut for room, not by the turn cap: summarise (the cut turn included) and go on.
            self.compact(trigger="overflow")
            return False
        if finish == "context":
            raise StopRun("context", "the model ran out of context while writing")
        if finish == "length":
            raise StopRun("turn_tokens", f"the model wrote {self.limits.turn_tokens} tokens in one turn without finishing")
        if parsed.errors:
            self._malformed(parsed.errors)
            return False
        self._malformed_in_row = 0
        if not calls:
            return True
        self.execute(calls)
        self.after_step(self.total_steps, calls)
        if self.cancel_event.is_set():
            raise StopRun("interrupted", "stopped by the user")
        return False

    def query(self, max_tokens: int | None = None, prompt_tokens: int = 0) -> Turn:
        reasoning = self.reasoning  # read once: /think may change it from another thread mid-turn
        self._opens_reasoning = self.model.info.opens_reasoning_for(reasoning)
        # The guard watches what the model says and thinks, not what its tool calls carry: a file written
        # with Write may repeat lines legitimately (a data table, 40,000 generated lines).
        guard = RepetitionGuard()

        def said(text: str) -> None:
            guard.feed(text)
            self.sink(TextDelta(text=text))

        def thought(text: str) -> None:
            guard.feed(text)
            self.sink(ReasoningDelta(text=text))

        splitter = StreamSplitter.for_dialect(
            self.model.info.dialect,
            on_text=said,
            on_reasoning=thought,
            reasoning_opened=self._opens_reasoning,
        )
        request = GenerationRequest(
            messages=self.messages, tools=self.specs, max_tokens=max_tokens or self.limits.turn_tokens,
            reasoning=reasoning,
        )
        text, end, repetition = self.stream(request, prompt_tokens, on_text=splitter.feed, guard=guard)
        splitter.flush()
        self.report_usage(end)
        return Turn(text=text, end=end, repetition=repetition)

    def stream(
        self, request: GenerationRequest, prompt_tokens: int, on_text: Callable[[str], None] = lambda text: None,
        purpose: Literal["turn", "summary"] = "turn", guard: RepetitionGuard | None = None,
    ) -> tuple[str, TurnEnd, Repetition | None]:
        """Run one generation: its text, its end, and the repetition that cut it short (None: not cut).

        Every backend's stream goes through here: the repetition guard stops a model that writes the same
        text again and again, and the context gauge moves while it writes (WritingProgress). `guard`: one
        that `on_text` feeds (with the prose only); without it, the whole stream is watched."""
        watch_all = guard is None
        guard = guard or RepetitionGuard()
        request.should_stop = lambda: self.cancel_event.is_set() or guard.found is not None
        pieces: list[str] = []
        end: TurnEnd | None = None
        written = raw = 0
        for chunk in self.model.generate(request):
            if isinstance(chunk, TextChunk):
                pieces.append(chunk.text)
                raw += len(chunk.text)
                guard.at_raw(raw)
                on_text(chunk.text)
                if watch_all:
                    guard.feed(chunk.text)
                written += 1
                if written % PROGRESS_EVERY == 0:
                    context = max(self.model.context_used(), prompt_tokens + written)
                    self.sink(WritingProgress(tokens=written, context=context, limit=request.max_tokens, purpose=purpose))
            elif isinstance(chunk, PrefillProgress):
                self.sink(PrefillEvent(done=chunk.done, total=chunk.total))
            elif isinstance(chunk, ContextGrown):
                self.sink(context_event(chunk))
            elif isinstance(chunk, TurnEnd):
                end = chunk
        if end is None:
            raise ModelError("the model backend ended a turn without reporting it")
        # A stop the user asked for wins over a repetition found at the same moment.
        repetition = guard.found if end.finish_reason == "cancelled" and not self.cancel_event.is_set() else None
        return "".join(pieces), end, repetition

    def report_usage(self, end: TurnEnd) -> None:
        u = end.usage
        self.sink(
            UsageEvent(
                step=self.steps, prompt_tokens=u.prompt_tokens, cached_tokens=u.cached_tokens,
                evaluated_tokens=u.evaluated_tokens, completion_tokens=u.completion_tokens,
                prefill_s=round(u.prefill_s, 4), decode_s=round(u.decode_s, 4), cost=u.cost,
            )
        )

    def parse_text(self, text: str, opens_reasoning: bool) -> str:
        """A turn's text without its reasoning and tool calls (a summary the model wrote)."""
        return screened(self.parser.parse(text, opens_reasoning)).content

    def parse(self, turn: Turn) -> ParsedTurn:
        if turn.end.tool_calls is not None or self.model.info.native_tools:
            parsed = ParsedTurn(
                content=turn.end.content if turn.end.content is not None else turn.text,
                reasoning=turn.end.reasoning, tool_calls=list(turn.end.tool_calls or []),
            )
        else:
            parsed = self.parser.parse(turn.text, self._opens_reasoning)
        return screened(parsed)

    def output_budget(self) -> OutputBudget:
        """Tokens the next tool result may take: what the model reads in a set time at its measured
        prompt speed (agent.core.output_budget), or --tool-output-tokens."""
        info = self.model.info
        return budget_for(
            info.prompt_tokens_per_s, min(self.limits.context, info.context_length or self.limits.context),
            self.limits.tool_output_tokens, model_token_counter(self.model),
        )

    def execute(self, calls: list[ToolCall]) -> None:
        results: list[ChatMessage] = []
        self._budget = self.output_budget()  # one per step: the model's measured speed moves between steps
        for call in calls:
            self.sink(ToolCallEvent(call=call))
            if self.cancel_event.is_set():
                output, is_error = "Error: not run, because the user stopped the agent", True
            else:
                output, is_error = self.run_tool(call)
            output = valid_unicode(output) + self._repeats.warning(call)
            self.sink(ToolResultEvent(tool_call_id=call.id, name=call.name, output=output, is_error=is_error))
            results.append(ChatMessage(role="tool", content=output, tool_call_id=call.id, name=call.name))
        notes = self._take_notes()
        if notes:
            last = results[-1]
            results[-1] = last.model_copy(update={"content": last.content + "\n\n" + notes})
        for message in results:
            self._add(message)

    def run_tool(self, call: ToolCall) -> tuple[str, bool]:
        """(result text, is_error). Every failure becomes an `Error:` observation for the model."""
        tool = self.tools.get(call.name)
        if tool is None:
            names = ", ".join(self.tools)
            return f"Error: there is no tool named {call.name!r}; the tools are {names}", True
        refusal = self.approvals.refusal(tool)
        if refusal is not None:
            return f"Error: {refusal}", True
        try:
            args = tool.args_model.model_validate(call.arguments)
        except ValidationError as exc:
            return "Error: " + format_validation_error(call.name, exc), True
        try:
            return tool.run(args, self.tool_context.for_call(call.id, self._budget)), False
        except ToolError as exc:
            return f"Error: {exc}", True
        except OSError as exc:
            # Disk full, permissions, ...: the apply is atomic, so nothing half-written is left.
            return f"Error: {call.name} failed: {exc.strerror or exc}", True
        except Exception as exc:  # a tool bug must not end the session: the model hears, the user sees
            self.sink(NoticeEvent(level="warning", text=f"{call.name} failed unexpectedly: {describe(exc)}"))
            return f"Error: {call.name} failed unexpectedly ({one_line(exc)})", True

    # -- helpers --------------------------------------------------------------------------------

    def _repeated(self, turn: Turn, repetition: Repetition) -> None:
        """A turn cut because the model repeated itself: kept up to the first copy of what it repeated
        (its tool calls dropped), and a note the model reads next, so it can take another way."""
        self._repetitions_in_row += 1
        tokens = turn.end.usage.completion_tokens or estimate_tokens(turn.text)
        unit = " ".join(repetition.unit.split())
        unit = unit if len(unit) <= 80 else unit[:79] + "…"
        parsed = screened(self.parser.parse(turn.text[: repetition.keep_chars], self._opens_reasoning))
        self._add(ChatMessage(role="assistant", content=parsed.content, reasoning_content=parsed.reasoning))
        self.sink(NoticeEvent(level="warning", text=(
            f"the model repeated itself ({repetition.copies} times: \"{unit}\"); ribbit ended its turn after "
            f"{tokens} tokens and told it to take another way")))
        if self._repetitions_in_row >= MAX_REPETITIONS_IN_ROW:
            raise StopRun("error", f"the model repeated itself in {MAX_REPETITIONS_IN_ROW} turns in a row")
        note = REPETITION_NOTE.format(tokens=tokens, copies=repetition.copies, unit=unit)
        self._add(ChatMessage(role="user", content=valid_unicode(note)))

    def _malformed(self, errors: list[str]) -> None:
        self._malformed_in_row += 1
        self.sink(NoticeEvent(level="warning", text="malformed tool call: " + "; ".join(errors)))
        if self._malformed_in_row >= MAX_MALFORMED_IN_ROW:
            raise StopRun("error", f"{MAX_MALFORMED_IN_ROW} malformed tool calls in a row: " + "; ".join(errors))
        text = (
            "Error: your tool call could not be read: " + "; ".join(errors)
            + ". Nothing was run. Write the call again in the exact format described in the system prompt."
        )
        self._add(ChatMessage(role="user", content=valid_unicode(text)))  # errors quote the model

    def _tell_instructions(self) -> None:
        summary = self.instructions.summary()
        if summary:
            self.sink(NoticeEvent(level="info", text=summary))
        for line in self.instructions.skipped:
            self.sink(NoticeEvent(level="warning", text=line))

    def _warn_if_no_reasoning_switch(self) -> None:
        if self.reasoning is None or self.model.info.reasoning is not None:
            return
        setting = "on" if self.reasoning else "off"
        self.sink(NoticeEvent(level="warning", text=no_reasoning_switch(self.model.info) + f"; reasoning {setting} is ignored"))

    def _take_notes(self) -> str:
        return self.notes.take()

    def _add(self, message: ChatMessage) -> None:
        self.messages.append(message)
        self.sink(MessageEvent(message=message))

    def _system_prompt(self) -> str:
        return system_prompt(
            self.root, self.specs, describe_tools=dialect_named(self.model.info.dialect).tools_in_prompt, instructions=self.instructions
        )


class Runs(Protocol):
    """What run_interruptibly drives: an AgentSession, or the Workspace session API around one."""

    def run(self, task: str) -> SummaryEvent: ...

    def cancel(self) -> None: ...


def run_interruptibly(session: Runs, task: str) -> SummaryEvent:
    """session.run(task) in a worker thread, so Ctrl+C stops the model cleanly instead of mid-write.

    The wait is on an Event, not Thread.join: a KeyboardInterrupt that lands inside
    join(timeout) can leave the thread marked as finished while it still runs (CPython 3.11),
    and the summary would be lost. A second Ctrl+C while the agent winds down stops waiting.
    """
    result: list[SummaryEvent] = []
    failure: list[BaseException] = []
    done = threading.Event()

    def work() -> None:
        try:
            result.append(session.run(task))
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=work, name="ribbit-agent", daemon=True)
    worker.start()
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        session.cancel()
        while not done.wait(0.2):
            pass
    if failure:
        raise failure[0]
    return result[0]
