"""llama.cpp in-process (llama-cpp-python), driven as an append-only token stream.

The backend keeps the exact tokens it has evaluated — prompt tokens and the sampled tokens
themselves — and each turn evaluates only what is new: the rest of the last turn's closing
(`<|im_end|>\\n`), the tool results and the next generation prompt. History is never re-rendered,
which is what makes FrogNano's hybrid (non-rewindable) architecture usable on a CPU.

Where the conversation does not extend the stream (a new task, `/clear`, an undo that rewinds it),
the backend restores a saved state instead of re-evaluating (models.state_cache): the template's
tool definitions and the system prompt are snapshotted — in memory and on disk — and so is the
start of every task. Tool calls are constrained by a lazy grammar once the model opens one
(models.grammar). Context, KV type, batch and threads come from the memory planner (models.memory).

Backend-specific extras beyond the ChatModel protocol:
`preload(system, tools)` evaluates or loads the system prompt ahead of the first task,
`restore_system_snapshot()` puts the context back to just the system prompt, `stats` counts tokens.
"""

from __future__ import annotations

import codecs
import hashlib
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.base import (
    Chunk,
    ContextFull,
    ContextGrown,
    GenerationRequest,
    ModelError,
    ModelInfo,
    PrefillProgress,
    ReasoningSwitch,
    TextChunk,
    TurnEnd,
    Usage,
)
from models.chat import ChatMessage, ToolSpec
from models.chat_template import ChatTemplate, Rendered
from models.dialects import ToolDialect, dialect_named, tool_call_grammar
from models.drafting import (
    DRAFT_MODES,
    MAX_DRAFT,
    DraftBudget,
    DraftMode,
    DraftStats,
    LookupDrafter,
    VerifyCost,
)
from models.gguf_meta import read_metadata
from models.grammar import ToolCallGrammar, literal
from models.llama_runtime import LlamaRuntime
from models.memory import MemoryPlan, available_memory, grown_context, model_shape, plan_memory
from models import llama_state
from models.saved_points import GENERATED, PointMeta, consumed_matches, message_hash, read_meta
from models.state_cache import DiskStateCache, Snapshot, SnapshotStore, model_identity
from models.threads import ContentionMeter, ThreadPolicy

GGUF_MAGIC = b"GGUF"
# The assistant turn the backend generated itself: its tokens are already in the stream.
_GENERATED = "<generated assistant turn>"
_STAND_IN = "RIBBIT_SYSTEM_STAND_IN_51c2"
# A prompt prefix shorter than this is not worth a snapshot of its own.
MIN_PREFIX_SNAPSHOT = 64
# Prompt tokens evaluated between two checks of should_stop (and two progress reports): None, a whole
# batch (the plan's n_batch). Half a batch (128 of 256) read prompts 0.95x as fast as a bare
# llama-cpp-python loop at every depth at real size; whole batches 0.98x (bench.engine section d). A stop
# then waits for at most one batch (~5 s at real size on 2 cores, 8K deep).
PREFILL_CHUNK: int | None = None
# A turn's room in the context: the prompt and this many tokens (or the turn's limit, if lower) must fit
# before it starts; a longer turn grows the context as it goes (models.memory.grown_context).
TURN_ROOM = 1024
# MTP drafting: stop a draft at a token the head itself gives less than this; in --draft auto, switch
# the head off when fewer than MTP_MIN_ACCEPTANCE of its first MTP_TRIAL drafted tokens were accepted.
MTP_P_MIN = 0.3
MTP_TRIAL = 64
MTP_MIN_ACCEPTANCE = 0.1

FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    32: "BF16",
}

__all__ = ["LlamaCppModel", "EngineStats", "available_memory", "check_model_file"]


def has_mtp_layer(meta: dict[str, Any]) -> bool:
    arch = meta.get("general.architecture", "")
    layers = meta.get(f"{arch}.nextn_predict_layers", 0)
    return isinstance(layers, int) and layers > 0


@dataclass
class Drafting:
    """The draft sources a loaded model uses (models.drafting), for `ribbit doctor` and the status bar."""

    mode: DraftMode = "auto"
    lookup: bool = False
    mtp: bool = False
    reason: str = ""

    def describe(self) -> str:
        sources = [name for name, on in (("lookup", self.lookup), ("mtp", self.mtp)) if on]
        text = "+".join(sources) if sources else "none"
        return f"{text} ({self.reason})" if self.reason else text


@dataclass
class EngineStats:
    """Counts over the backend's life: what was decoded versus what the stream holds."""

    evaluated: int = 0  # every token run through llama_decode (prompt and sampled)
    restored: int = 0  # tokens brought back from a snapshot instead of being evaluated
    disk_loads: int = 0
    snapshot_restores: int = 0
    grammar_triggers: int = 0
    grammar_skipped: int = 0
    turns: list[Usage] = field(default_factory=list)
    lookup: DraftStats = field(default_factory=DraftStats)
    mtp: DraftStats = field(default_factory=DraftStats)
    unguarded_renders: int = 0  # renders whose message texts could not be told from markup (tokenised whole)
    growths: list[ContextGrown] = field(default_factory=list)  # the context made larger (_grow)
    verify_batches: int = 0  # decodes of more than one sampled/drafted token
    rolled_back: int = 0  # drafted tokens evaluated and then rolled back


def check_model_file(path: Path) -> None:
    """One-line errors for the usual ways a model file is wrong, before llama.cpp sees it."""
    if not path.exists():
        raise ModelError(f"model file {path} does not exist")
    if not path.is_file():
        raise ModelError(f"model path {path} is not a file")
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc.strerror or exc}") from None
    if magic != GGUF_MAGIC:
        raise ModelError(f"{path} is not a GGUF file (convert a Hugging Face checkpoint with `ribbit quantize`)")
    free = available_memory()
    size = path.stat().st_size
    if free is not None and size > free:
        raise ModelError(
            f"{path.name} needs about {size / 2**30:.1f} GiB of RAM but only {free / 2**30:.1f} GiB is free"
        )


def template_reasoning_switch(template: ChatTemplate) -> ReasoningSwitch | None:
    """The model's reasoning switch, if its template reads `enable_thinking`."""
    found = template.reasoning
    if not found.switch:
        return None
    return ReasoningSwitch(via="template", default_on=found.default_on, opens_when_on=found.opens_when_on,
                           opens_when_off=found.opens_when_off)


def fingerprint(message: ChatMessage) -> str:
    return message.model_dump_json()


class LlamaCppModel:
    def __init__(
        self,
        path: Path,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        n_batch: int | None = None,
        temperature: float = 0.7,
        top_p: float = 0.8,
        top_k: int = 20,
        min_p: float = 0.0,
        seed: int = 0,
        plan: MemoryPlan | None = None,
        grammar: bool = True,
        state_dir: Path | None = None,
        persist_states: bool = True,
        snapshot_budget: int = 1 << 30,
        prefill_chunk: int | None = PREFILL_CHUNK,
        draft: DraftMode = "auto",
        adapt_threads: bool = True,
        chat_template: str | None = None,
        verify_cost: VerifyCost | None = None,
    ) -> None:
        check_model_file(path)
        if draft not in DRAFT_MODES:
            raise ModelError(f"unknown draft mode {draft!r}; expected one of {', '.join(DRAFT_MODES)}")
        if temperature < 0:
            raise ModelError(f"temperature must be 0 or more, not {temperature}")
        try:
            import llama_cpp
        except ImportError as exc:  # a broken install, not a user error
            raise ModelError(f"llama-cpp-python is not usable: {exc}") from None
        meta = read_metadata(path)
        self.thread_policy = ThreadPolicy(flag=n_threads)
        self.adapt_threads = adapt_threads
        meter = ContentionMeter()
        meter.start()
        recurrent = bool(model_shape(meta).recurrent_layers)
        # Rejected drafts roll the recurrent layers back to snapshots llama.cpp keeps (n_rs_seq); an
        # architecture without that support gets 0 from llama.cpp, and drafting stays off for it.
        rollback = MAX_DRAFT if draft != "none" and recurrent else 0
        if plan is None:
            self.plan = plan_memory(path, n_ctx, threads=self.thread_policy.choice, rollback_tokens=rollback, meta=meta)
        else:
            self.plan = plan
            self.plan.rollback_tokens = rollback
            self.thread_policy = ThreadPolicy(flag=n_threads or plan.n_threads)
        if n_threads:
            self.plan.n_threads = n_threads
        self.plan.threads = self.thread_policy.choice
        if n_batch:
            self.plan.n_batch = n_batch
        wants_mtp = draft in ("mtp", "auto") and has_mtp_layer(meta)
        try:
            self.llm = LlamaRuntime(
                path, n_ctx=self.plan.initial_ctx, n_batch=self.plan.n_batch, n_threads=self.plan.n_threads,
                flash_attn=self.plan.flash_attn, type_kv=self.plan.type_kv, seed=seed,
                n_rs_seq=self.plan.rollback_tokens, load_mtp=wants_mtp,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelError(f"llama.cpp cannot load {path.name}: {exc}") from None
        self._llama_cpp = llama_cpp
        self.sampling: dict[str, Any] = dict(temp=temperature, top_p=top_p, top_k=top_k, min_p=min_p)
        self.n_batch = self.plan.n_batch
        self.prefill_chunk = max(1, min(prefill_chunk or self.plan.n_batch, self.plan.n_batch))
        self.use_grammar = grammar
        # Text every assistant turn starts with, as if the model had written it (benchmarks, forcing a call).
        self.response_prefix = ""
        meta = dict(self.llm.metadata)
        arch = meta.get("general.architecture", "")
        # `chat_template` replaces the GGUF's own (a file whose template is missing or wrong; benchmarks).
        self.template = ChatTemplate(
            chat_template or meta.get("tokenizer.chat_template"),
            bos_token=self._token_text(self.llm.token_bos()),
            eos_token=self._token_text(self.llm.token_eos()),
        )
        file_type = meta.get("general.file_type")
        self.recurrent = self.llm.is_recurrent
        self.drafting = self._drafting_setup(draft, wants_mtp)
        self.info = ModelInfo(
            name=meta.get("general.name") or path.stem,
            path=str(path),
            quantization=FILE_TYPES.get(int(file_type), f"type {file_type}") if file_type else None,
            architecture=arch or None,
            dialect=self.template.dialect,
            # The largest context (compaction triggers there); the allocation grows to it (_grow).
            context_length=max(self.plan.n_ctx, self.llm.n_ctx()),
            context_allocated=self.llm.n_ctx(),
            opens_reasoning=self.template.opens_reasoning,
            threads=self.plan.threads.short() if self.plan.threads else str(self.plan.n_threads),
            threads_reason=self.plan.threads.reason() if self.plan.threads else "",
            drafting=self.drafting.describe(),
            reasoning=template_reasoning_switch(self.template),
            memory_bytes=self.plan.total_bytes,
        )
        self.stop_ids = {self.llm.token_eos(), *self._tokenize(self.template.turn_close)}
        self._eog: dict[int, bool] = {}
        self._close_tokens = self._tokenize(self.template.turn_close + self.template.turn_end)
        self._consumed: list[str] = []
        self._pending: list[int] = []
        self._system_tokens: list[int] | None = None
        self.snapshots = SnapshotStore(budget=snapshot_budget)
        identity = model_identity(path, kv=self.plan.kv_type, flash=self.plan.flash_attn)
        self.disk = DiskStateCache(identity, state_dir) if persist_states else None
        # A saved conversation (models.saved_points) also depends on the recurrent rollback cells and on
        # the template that rendered it.
        self.identity = model_identity(
            path, kv=self.plan.kv_type, flash=self.plan.flash_attn, rollback=self.plan.rollback_tokens,
            template=hashlib.sha256(self.template.source.encode()).hexdigest()[:16],
        )
        self.stats = EngineStats()
        self._allocated = self.llm.n_ctx()
        self._growths: list[ContextGrown] = []  # growths not yet reported in a turn's stream
        self._grammars: dict[str, ToolCallGrammar | None] = {}
        self._lookup = LookupDrafter()
        # Timed on this machine while decoding (a test may fix it, to count drafts independent of the load).
        self.verify_cost = verify_cost or VerifyCost()
        self._lookup_budget = DraftBudget(self.verify_cost)
        self._mtp_budget = DraftBudget(self.verify_cost)
        self._observe_contention(meter.stop())

    def _drafting_setup(self, mode: DraftMode, wants_mtp: bool) -> Drafting:
        """Which draft sources this model gets, and why not the others."""
        setup = Drafting(mode=mode)
        if mode == "none":
            setup.reason = "off (--draft none)"
            return setup
        if self.recurrent and self.llm.n_rs_seq < MAX_DRAFT:
            setup.reason = "off: this model's recurrent layers cannot roll back rejected drafts in llama.cpp"
            return setup
        setup.lookup = mode in ("lookup", "auto")
        if wants_mtp:
            try:
                self.llm.open_mtp(self.plan.n_threads, self.plan.type_kv, self.plan.flash_attn)
                setup.mtp = True
            except (ValueError, RuntimeError, AttributeError) as exc:  # AttributeError: a build without the MTP calls
                setup.reason = f"MTP head unusable: {exc}"
        elif mode == "mtp":
            setup.reason = "the model has no MTP layer"
        return setup

    def _observe_contention(self, others_busy: float | None) -> None:
        """Revise the thread count from what other programs measurably used (models.threads)."""
        if not self.adapt_threads:
            return
        before = self.plan.n_threads
        choice = self.thread_policy.observe(others_busy)
        self.plan.threads = choice
        if choice.n_threads != before:
            self.plan.n_threads = choice.n_threads
            self.llm.set_threads(choice.n_threads)
            if self.llm.mtp is not None:
                self._llama_cpp.llama_set_n_threads(self.llm.mtp.ctx, choice.n_threads, choice.n_threads)
        self.info.threads = choice.short()
        self.info.threads_reason = choice.reason()

    # -- ChatModel ------------------------------------------------------------------------------

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        messages, tools = list(request.messages), list(request.tools)
        # Only the generation prompt reads it: a switch between turns appends, never re-renders.
        self.template.enable_thinking = request.reasoning if self.info.reasoning is not None else None
        segments = self._prepare(messages, tools)
        new_tokens = [t for tokens, _ in segments for t in tokens]
        cached = self.llm.n_tokens
        if cached + len(new_tokens) + 1 >= self.info.context_length:
            raise ContextFull(
                f"the prompt needs {cached + len(new_tokens)} tokens but the context holds {self.info.context_length}"
            )
        usage = Usage(prompt_tokens=cached + len(new_tokens), cached_tokens=cached, evaluated_tokens=0)
        done_messages = [fingerprint(m) for m in messages] + [_GENERATED]
        self._grow(cached + len(new_tokens) + 1 + min(request.max_tokens, TURN_ROOM))
        yield from self._reported_growths()
        started = time.perf_counter()
        for done, rest in self._prefill(segments, request.should_stop):
            if rest is not None:
                # What was not evaluated stays pending, so the stream stays exactly what a full run
                # would have had; the turn counts as an empty assistant turn.
                self._pending = rest
                self._consumed = done_messages
                usage.prompt_tokens = cached + done
                usage.prefill_s = time.perf_counter() - started
                self.stats.turns.append(usage)
                yield TurnEnd(finish_reason="cancelled", usage=usage)
                return
            usage.evaluated_tokens = done
            yield from self._reported_growths()
            yield PrefillProgress(done=done, total=len(new_tokens))
        self._pending = []
        self._consumed = done_messages
        usage.prefill_s = time.perf_counter() - started
        self._note_prompt_speed(usage.evaluated_tokens, usage.prefill_s)
        yield from self._decode(request, tools, usage)

    def _prefill(
        self, segments: list[tuple[list[int], str | None]], should_stop: Callable[[], bool] = lambda: False,
    ) -> Iterator[tuple[int, list[int] | None]]:
        """Evaluate the segments in prefill_chunk batches, snapshotting each marked prefix after it; yields
        (tokens done, None) after each batch. When should_stop() says so before a batch, yields
        (tokens done, the tokens not evaluated) and stops."""
        done = 0
        for seg_index, (tokens, mark) in enumerate(segments):
            for start in range(0, len(tokens), self.prefill_chunk):
                if should_stop():
                    yield done, tokens[start:] + [t for later, _ in segments[seg_index + 1 :] for t in later]
                    return
                chunk = tokens[start : start + self.prefill_chunk]
                self._eval(chunk)
                done += len(chunk)
                yield done, None
            if mark:
                self._snapshot_prefix(mark)

    def _note_prompt_speed(self, tokens: int, seconds: float) -> None:
        """Measured prompt processing speed (ModelInfo.prompt_tokens_per_s), e.g. for sizing tool results."""
        if tokens < 32 or seconds <= 0:
            return
        rate = tokens / seconds
        old = self.info.prompt_tokens_per_s
        self.info.prompt_tokens_per_s = rate if old is None else 0.7 * old + 0.3 * rate

    def context_used(self) -> int:
        return self.llm.n_tokens + len(self._pending)

    def _grow(self, needed: int) -> None:
        """Make the context hold at least `needed` tokens (up to the largest): a larger context with the same
        state (LlamaRuntime.resize)."""
        allocated = self.llm.n_ctx()
        largest = self.info.context_length
        if needed <= allocated or allocated >= largest:
            return
        target = grown_context(allocated, needed, largest)
        started = time.perf_counter()
        try:
            self.llm.resize(target)
        except RuntimeError as exc:
            raise ModelError(f"could not grow the context from {allocated} to {target} tokens: {exc}") from None
        self._allocated = self.info.context_allocated = self.llm.n_ctx()
        growth = ContextGrown(before=allocated, after=self._allocated, seconds=time.perf_counter() - started)
        self.stats.growths.append(growth)
        self._growths.append(growth)

    def _reported_growths(self) -> Iterator[ContextGrown]:
        while self._growths:
            yield self._growths.pop(0)

    def count_tokens(self, text: str) -> int:
        """Tokens `text` takes as message text (sizing tool results, agent.core.output_budget); vocabulary only,
        so safe between turns."""
        return len(self.llm.tokenize(text.encode("utf-8", "surrogatepass"), add_bos=False, special=False)) if text else 0

    def close(self) -> None:
        self.snapshots.clear()
        self.llm.close()

    # -- extras beyond ChatModel ----------------------------------------------------------------

    def preload(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> Iterator[PrefillProgress]:
        """Evaluate (or load from disk) the system prompt and tool definitions before the first task; for
        a resumed conversation whose saved state was not loaded, the conversation through its last
        assistant turn too, as if that turn had just been generated (the next turn appends its close)."""
        messages, tool_list = list(messages), list(tools)
        if len(messages) > 1 and self.context_used():
            return  # the conversation (its saved state) is in the context already
        last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=None)
        if last is None:
            parts = self._prompt_parts(messages[:1], tool_list, with_rest=False)
        else:
            try:
                parts = self._prompt_parts(messages[: last + 1], tool_list, with_rest=True, generated_last=True)
            except ModelError:  # a template whose turn close cannot be cut off: the system prompt only
                last, parts = None, self._prompt_parts(messages[:1], tool_list, with_rest=False)
            if sum(len(t) for t, _ in parts) + 1 >= self.info.context_length:
                last, parts = None, self._prompt_parts(messages[:1], tool_list, with_rest=False)
        self._grow(sum(len(t) for t, _ in parts) + 1)
        segments = self._restore_prefix(parts)
        total = sum(len(t) for t, _ in segments)
        self._consumed, self._pending = [], []  # until the whole conversation is read
        for done, _ in self._prefill(segments):
            if done == total and last is not None:  # before the last yield: a stop right after keeps it
                self._consumed = [fingerprint(m) for m in messages[:last]] + [_GENERATED]
            yield PrefillProgress(done=done, total=total)

    def restore_system_snapshot(self) -> bool:
        """Back to just the system prompt (for /clear); False when none was taken yet."""
        if self._system_tokens is None:
            return False
        snap = self.snapshots.prefix("system", self._system_tokens)
        if snap is None or not self._restore(snap):
            return False
        self._consumed, self._pending = [], []
        return True

    def prompt_tokens(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> int:
        """How many tokens the next turn's prompt holds, counted without evaluating anything (compaction)."""
        messages, tool_list = list(messages), list(tools)
        prints = [fingerprint(m) for m in messages]
        if self._consumed and self._extends(messages, prints, self._consumed):
            new = self._continuation(messages, len(self._consumed), tool_list)
            return self.llm.n_tokens + len(self._pending) + len(new)
        return sum(len(tokens) for tokens, _ in self._prompt_parts(messages, tool_list, with_rest=True))

    # -- saved points (models.saved_points): resume and rewind in another process ------------------

    def state_identity(self) -> str:
        return self.identity

    def save_point(self, path: Path) -> bool:
        """Save the stream as it is after the last turn (state file + what it covers)."""
        tokens = self.stream_tokens()
        if not tokens or not self._consumed:
            return False
        meta = PointMeta(
            identity=self.identity, n_tokens=len(tokens), pending=list(self._pending),
            consumed=[GENERATED if seen == _GENERATED else message_hash(seen) for seen in self._consumed],
        )
        return llama_state.save_file(self.llm, path, tokens, meta)

    def load_point(self, path: Path, messages: list[ChatMessage]) -> str | None:
        """Continue from a saved point of `messages`' conversation; None when loaded, else why not."""
        meta = read_meta(path)
        if isinstance(meta, str):
            return meta
        if meta.identity != self.identity:
            return "it was saved with another model or other engine settings"
        prints = [fingerprint(m) for m in messages]
        if not meta.consumed or not consumed_matches(meta.consumed, prints, [m.role for m in messages]):
            return "its saved state does not belong to this conversation"
        n_vocab = self.llm.n_vocab()
        if meta.n_tokens >= self.info.context_length or any(not 0 <= t < n_vocab for t in meta.pending):
            return "its saved state does not fit this context"
        self._grow(meta.n_tokens + len(meta.pending) + 1)
        tokens = llama_state.load_file(self.llm, path, meta.n_tokens)
        if tokens is None or any(not 0 <= t < n_vocab for t in tokens):
            self.reset()
            return "llama.cpp refused its saved state"
        llama_state.set_tokens(self.llm, tokens)
        self._consumed = [_GENERATED if seen == GENERATED else prints[i] for i, seen in enumerate(meta.consumed)]
        self._pending = list(meta.pending)
        self.stats.disk_loads += 1
        self.stats.restored += len(tokens)
        return None

    def last_logits(self) -> Any:
        """The logits after the last evaluated token, as a numpy array (tests, diagnostics)."""
        return self.llm.logits(-1).copy()

    def stream_tokens(self) -> list[int]:
        return [int(t) for t in self.llm.input_ids[: self.llm.n_tokens]]

    # -- the token stream -----------------------------------------------------------------------

    def _prepare(self, messages: list[ChatMessage], tools: list[ToolSpec]) -> list[tuple[list[int], str | None]]:
        """Segments of new tokens to evaluate, each with the snapshot to take after it (if any).

        Extends the stream when the conversation extends what was evaluated; else restores the best
        snapshot (a task start, the system prompt, the tool definitions) and renders only what follows.
        """
        prints = [fingerprint(m) for m in messages]
        if self._consumed and self._extends(messages, prints, self._consumed):
            new = messages[len(self._consumed) :]
            if any(m.role == "user" for m in new):
                self._snapshot_turn()
            return [(self._pending + self._continuation(messages, len(self._consumed), tools), None)]
        for snap in self.snapshots.turns():
            if snap.consumed and self._extends(messages, prints, snap.consumed) and self._restore(snap):
                self._consumed, self._pending = list(snap.consumed), list(snap.pending)
                return [(self._pending + self._continuation(messages, len(snap.consumed), tools), None)]
        self._consumed, self._pending = [], []
        return self._restore_prefix(self._prompt_parts(messages, tools, with_rest=True))

    def _continuation(self, messages: list[ChatMessage], done: int, tools: list[ToolSpec]) -> list[int]:
        """Tokens after the generated turn `messages[done - 1]`: its close, as the template writes it after
        that turn (Gemma 4's depends on whether the turn made calls), then the messages that follow it."""
        rendered = self.template.guarded(
            lambda new: self.template.after_turn(messages[done - 1], new, tools), messages[done:]
        )
        return self._tokenize_rendered(rendered, 0, len(rendered.text))

    def _prompt_parts(
        self, messages: list[ChatMessage], tools: list[ToolSpec], with_rest: bool, generated_last: bool = False,
    ) -> list[tuple[list[int], str | None]]:
        """A fresh render cut into (tool definitions, system prompt, rest), tokenised separately.
        generated_last: the conversation ends with an assistant turn, read up to where its generation
        would have stopped (before the close that _continuation appends); ModelError where it cannot."""
        rendered = (
            self.template.guarded(lambda all_: self.template.render_conversation(all_, tools), messages)
            if with_rest else Rendered(text="")
        )
        text = rendered.text
        if generated_last:
            text = self.template.cut_generated(text, messages[-1], tools)
        cuts: list[tuple[str, str | None]] = []
        if messages and messages[0].role == "system":
            scaffold, sys_text = self._system_prefixes(messages[0], tools)
            if not with_rest:
                text = sys_text
                rendered = Rendered(text=text)
            if sys_text and text.startswith(sys_text):
                if scaffold and sys_text.startswith(scaffold):
                    cuts.append((scaffold, "tools"))
                cuts.append((sys_text, "system"))
        cuts.append((text, None))
        bos = not (self.template.bos_token and text.startswith(self.template.bos_token))
        segments: list[tuple[list[int], str | None]] = []
        position = 0
        for end_text, mark in cuts:
            # Every cut is a prefix of `text`, so the spans of message text apply to each piece.
            tokens = self._tokenize_rendered(rendered, position, len(end_text), bos=bos and position == 0)
            position = len(end_text)
            if mark == "tools" and len(tokens) < MIN_PREFIX_SNAPSHOT:
                mark = None
            if segments and segments[-1][1] is None:  # merge into the previous unmarked segment
                segments[-1] = (segments[-1][0] + tokens, mark)
            else:
                segments.append((tokens, mark))
        return [s for s in segments if s[0] or s[1]]

    def _system_prefixes(self, system: ChatMessage, tools: list[ToolSpec]) -> tuple[str, str]:
        """(text before the system prompt's content — the tool definitions —, the whole system turn).

        Rendered with a stand-in user turn, since some templates refuse a conversation without one."""
        user = ChatMessage(role="user", content="U")
        stand_in = system.model_copy(update={"content": _STAND_IN})
        try:
            probe = self.template.render(self.template.template_messages([system, user]), tools, False)
            shell = self.template.render(self.template.template_messages([stand_in, user]), tools, False)
        except ModelError:
            return "", ""
        at = shell.find(_STAND_IN)
        scaffold = shell[:at] if at != -1 else ""
        if not probe.startswith(scaffold):
            return "", ""
        marker = self.template.turn_close + self.template.turn_end
        start = probe.find(system.content, len(scaffold)) if system.content else len(scaffold)
        end = probe.find(marker, start + len(system.content)) if start != -1 else -1
        if end == -1:
            return scaffold, ""
        return scaffold, probe[: end + len(marker)]

    def _restore_prefix(self, segments: list[tuple[list[int], str | None]]) -> list[tuple[list[int], str | None]]:
        """Skip the longest marked prefix a snapshot already holds (the context itself, memory, disk)."""
        prefix: list[int] = []
        ends = []
        for index, (tokens, mark) in enumerate(segments):
            prefix = prefix + tokens
            if mark:
                ends.append((index, list(prefix), mark))
                if mark == "system":
                    self._system_tokens = list(prefix)
        current = self.stream_tokens() if not self._pending else None
        for index, tokens, mark in reversed(ends):
            if current == tokens:
                return segments[index + 1 :]
            snap = self.snapshots.prefix(mark, tokens)
            if snap is not None and self._restore(snap):
                return segments[index + 1 :]
            if self.disk is not None and self.disk.has(tokens):
                self._grow(len(tokens) + 1)
            if self.disk is not None and self.disk.load(self.llm, tokens):
                self.stats.disk_loads += 1
                self.stats.restored += len(tokens)
                self.snapshots.add(Snapshot(tokens=tokens, data=llama_state.capture(self.llm), kind=mark))
                return segments[index + 1 :]
        self.llm.reset()
        return segments

    def _extends(self, messages: Sequence[ChatMessage], prints: list[str], consumed: list[str]) -> bool:
        if len(messages) <= len(consumed):
            return False
        for index, seen in enumerate(consumed):
            if seen == _GENERATED:
                if messages[index].role != "assistant":
                    return False
            elif prints[index] != seen:
                return False
        return True

    def _snapshot_prefix(self, kind: str) -> None:
        tokens = self.stream_tokens()
        if self.snapshots.prefix(kind, tokens) is None and llama_state.state_size(self.llm) <= self.snapshots.budget:
            self.snapshots.add(Snapshot(tokens=tokens, data=llama_state.capture(self.llm), kind=kind))
        if self.disk is not None and not self.disk.has(tokens):
            self.disk.save(self.llm, tokens)

    def _snapshot_turn(self) -> None:
        if llama_state.state_size(self.llm) > self.snapshots.budget:
            return  # a long conversation: copying it would cost more memory than it may save time
        tokens = self.stream_tokens()
        self.snapshots.add(
            Snapshot(tokens=tokens, data=llama_state.capture(self.llm), consumed=list(self._consumed), pending=list(self._pending))
        )

    def _restore(self, snap: Snapshot) -> bool:
        if not llama_state.restore(self.llm, snap.data, snap.tokens):
            self.llm.reset()
            return False
        self.stats.snapshot_restores += 1
        self.stats.restored += len(snap.tokens)
        return True

    def reset(self) -> None:
        self.llm.reset()
        self._consumed = []
        self._pending = []

    # -- generation -----------------------------------------------------------------------------

    def _decode(self, request: GenerationRequest, tools: list[ToolSpec], usage: Usage) -> Iterator[Chunk]:
        """Sample the assistant turn. Where a draft source proposes tokens, the sampled token and the
        drafts are evaluated in one batch and each draft is checked by sampling the target there
        (models.drafting explains why that keeps the output distribution); rejected drafts are rolled
        back (KV cells removed, recurrent state restored from llama.cpp's snapshots)."""
        started = time.perf_counter()
        meter = ContentionMeter()
        meter.start()
        finish = "stop"
        sampler = self.llm.sampler(**self.sampling)  # one sampler per turn keeps its state
        watcher = self._grammar_watcher(tools, self.info.opens_reasoning_for(request.reasoning))
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        produced = 0
        self._pending = []  # the turn's close comes with the next messages (_continuation)
        forced = self._tokenize(self.response_prefix) if self.response_prefix else []
        if forced:  # known tokens: read in one batch, like a prompt
            for token in forced:
                sampler.accept(token)
            self._grow(self.llm.n_tokens + len(forced) + min(request.max_tokens, TURN_ROOM))
            yield from self._reported_growths()
            self._eval(forced)
            raws = [self.llm.piece(token) for token in forced]
            produced = len(forced)
            switched = watcher.feed_many(forced, raws) if watcher is not None else None
            if switched is not None:
                sampler, watcher = switched, None
            piece = decoder.decode(b"".join(raws))
            if piece:
                yield TextChunk(piece)
        limit = self.info.context_length - len(self._close_tokens)
        drafting = self.drafting.lookup or self.drafting.mtp  # re-read after each token: MTP may switch off
        carry: int | None = None  # a token sampled while verifying drafts, not yet evaluated
        index = -1  # the output row whose logits the next sample reads
        while True:
            if cut := request.cut_off(produced):
                finish = cut
                break
            if self.llm.n_tokens >= limit:
                finish = "context"
                break
            if carry is None:
                token = sampler.sample(self.llm._ctx, index)  # noqa: SLF001
            else:
                token, carry = carry, None
            produced += 1
            if drafting:
                self._lookup_budget.observe(token)  # a stop settles a shadow as a miss, as it should
            if self._is_stop(token):
                break
            if drafting:
                room = min(request.max_tokens - produced, limit - self.llm.n_tokens - 1)
                drafts, source = self._propose(token, room)
            else:
                drafts = []
            if self.llm.n_tokens + 1 + len(drafts) > self._allocated:
                self._grow(self.llm.n_tokens + 1 + len(drafts) + min(request.max_tokens - produced, TURN_ROOM))
                yield from self._reported_growths()
            first = self.llm.n_tokens
            if drafts:
                timed = time.perf_counter()
                self._eval_batch([token, *drafts])
                self.verify_cost.record(1 + len(drafts), time.perf_counter() - timed, first)
            elif drafting:
                timed = time.perf_counter()
                self._eval([token])
                self.verify_cost.record(1, time.perf_counter() - timed, first)
            else:  # the plain path: nothing per token beyond what a bare llama-cpp-python loop does
                self._eval([token])
            index = -1
            for position, emitted in enumerate((token, *drafts) if drafts else (token,)):
                if position > 0:
                    check = sampler.sample(self.llm._ctx, position - 1)  # noqa: SLF001
                    if check != emitted:
                        carry = check
                        break
                    produced += 1
                    index = position
                    self._lookup_budget.observe(emitted)
                raw = self.llm.piece(emitted)
                if watcher is not None:
                    switched = watcher.feed(emitted, raw)
                    if switched is not None:
                        sampler = switched
                        watcher = None
                piece = decoder.decode(raw)
                if piece:
                    yield TextChunk(piece)
            if drafts:
                self._settle_drafts(source, first, len(drafts), accepted=max(0, index))
            drafting = self.drafting.lookup or self.drafting.mtp
        self._lookup_budget.drop()  # what follows this turn is the next message, not the model's text
        tail = decoder.decode(b"", final=True)
        if tail:
            yield TextChunk(tail)
        usage.completion_tokens = produced
        usage.decode_s = time.perf_counter() - started
        self.stats.turns.append(usage)
        self._observe_contention(meter.stop())
        yield TurnEnd(finish_reason=finish, usage=usage)  # type: ignore[arg-type]

    def _is_stop(self, token: int) -> bool:
        eog = self._eog.get(token)
        if eog is None:  # one ctypes call per distinct token, not per sampled one
            eog = self._eog[token] = token in self.stop_ids or bool(
                self._llama_cpp.llama_vocab_is_eog(self.llm._model.vocab, token))  # noqa: SLF001
        return eog

    def _propose(self, token: int, room: int) -> tuple[list[int], str]:
        """Drafts to follow `token` (sampled, not yet evaluated), at most `room`; lookup first, then MTP."""
        room = min(room, MAX_DRAFT)
        if room <= 0:
            return [], ""
        drafting = self.drafting
        if drafting.lookup:
            stream = self.llm.input_ids[: self.llm.n_tokens]
            drafts = self._lookup_budget.draft_or_shadow(
                room, self.llm.n_tokens, lambda n: self._until_stop(self._lookup.propose(stream, token, n, self.stop_ids)))
            if drafts:
                return drafts, "lookup"
        if drafting.mtp and self.llm.mtp is not None:
            n = self._mtp_budget.length(room, self.llm.n_tokens)
            if n:
                drafts = self._until_stop(self.llm.mtp.draft(token, self.llm.n_tokens, n, p_min=MTP_P_MIN))
                if drafts:
                    return drafts, "mtp"
        return [], ""

    def _until_stop(self, drafts: list[int]) -> list[int]:
        for i, token in enumerate(drafts):
            if self._is_stop(token):
                return drafts[:i]
        return drafts

    def _settle_drafts(self, source: str, first: int, drafted: int, accepted: int) -> None:
        """Keep the accepted drafts, roll back the rest, and learn from the outcome."""
        rejected = drafted - accepted
        if rejected:
            try:
                self.llm.truncate(first + 1 + accepted)
            except RuntimeError as exc:
                raise ModelError(f"llama.cpp could not roll back rejected drafts: {exc}") from None
        self.stats.evaluated -= rejected  # rolled back, so not part of the stream
        self.stats.rolled_back += rejected
        self.stats.verify_batches += 1
        stats = self.stats.lookup if source == "lookup" else self.stats.mtp
        stats.proposals += 1
        stats.drafted += drafted
        stats.accepted += accepted
        (self._lookup_budget if source == "lookup" else self._mtp_budget).record(drafted, accepted)
        if (source == "mtp" and self.drafting.mode == "auto" and stats.drafted >= MTP_TRIAL
                and stats.acceptance < MTP_MIN_ACCEPTANCE):
            # The head does not predict this model's text (an untrained head): stop paying for it.
            self.drafting.mtp = False
            self.drafting.reason = f"MTP head off: {stats.acceptance:.0%} of {stats.drafted} drafts accepted"
            self.info.drafting = self.drafting.describe()
            self.llm.close_mtp()

    def _grammar_watcher(self, tools: list[ToolSpec], opens_reasoning: bool) -> _GrammarWatcher | None:
        if not self.use_grammar or not tools:
            return None
        key = "|".join(t.model_dump_json() for t in tools)
        if key not in self._grammars:
            self._grammars[key] = tool_call_grammar(self.info.dialect, tools, self.info.opens_reasoning)
        grammar = self._grammars[key]
        if grammar is None:
            return None
        return _GrammarWatcher(
            dialect_named(self.info.dialect), grammar, tools, opens_reasoning, self._constrained_sampler, self.stats,
        )

    def _constrained_sampler(self, gbnf: str, seen: Sequence[int]) -> Any:
        """The turn's sampler chain with a (non-lazy) grammar after the penalties, the grammar having
        accepted the tokens `seen` already; None when llama.cpp cannot build the grammar."""
        llama_cpp = self._llama_cpp
        grammar = llama_cpp.llama_sampler_init_grammar(self.llm._model.vocab, gbnf.encode("utf-8"), b"root")  # noqa: SLF001
        if not grammar:
            return None
        sampler = self.llm.sampler(**self.sampling, grammar=grammar)
        for token in seen:
            llama_cpp.llama_sampler_accept(grammar, token)
        return sampler

    def _eval(self, tokens: Sequence[int]) -> None:
        try:
            self.llm.eval(tokens)
        except RuntimeError as exc:
            raise ModelError(f"llama.cpp failed while evaluating: {exc}") from None
        self.stats.evaluated += len(tokens)

    def _eval_batch(self, tokens: Sequence[int]) -> None:
        """One batch with logits at every position: a sampled token and the drafts after it."""
        try:
            self.llm.eval_all(tokens)
        except RuntimeError as exc:
            raise ModelError(f"llama.cpp failed while verifying drafts: {exc}") from None
        self.stats.evaluated += len(tokens)

    def _tokenize(self, text: str, bos: bool = False) -> list[int]:
        """Template markup: special-token text (`<|im_start|>`, `<tool_call>`) becomes those tokens."""
        if not text:
            return []
        return self.llm.tokenize(text.encode("utf-8"), add_bos=bos, special=True)

    def _tokenize_rendered(self, rendered: Rendered, start: int, end: int, bos: bool = False) -> list[int]:
        """rendered.text[start:end], its message texts (files, command output, the user's words) as plain
        text: a `<|im_end|>` in a README stays characters and cannot end a turn (chat_template.guarded)."""
        if not rendered.exact:
            self.stats.unguarded_renders += 1
        tokens: list[int] = []
        at = start
        for lo, hi in rendered.plain:
            lo, hi = max(lo, start), min(hi, end)
            if lo >= hi:
                continue
            tokens += self._tokenize(rendered.text[at:lo], bos=bos and not tokens and at == start)
            tokens += self.llm.tokenize(rendered.text[lo:hi].encode("utf-8"), add_bos=False, special=False)
            at = hi
        return tokens + self._tokenize(rendered.text[at:end], bos=bos and not tokens and at == start)

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self.llm.detokenize([token], special=True).decode("utf-8", "replace")


class _GrammarWatcher:
    """Watches the generated text for the start of a tool call, then swaps in a grammar sampler.

    Done in Python rather than with llama.cpp's lazy-grammar triggers, whose std::regex runs over the
    whole turn at every token (quadratic, and it recurses on long reasoning).
    """

    def __init__(
        self, dialect: ToolDialect, grammar: ToolCallGrammar, tools: list[ToolSpec], opens_reasoning: bool,
        build: Callable[[str, Sequence[int]], Any], stats: EngineStats,
    ) -> None:
        self.dialect = dialect
        self.grammar = grammar
        self.build = build
        self.stats = stats
        self.names = [t.name for t in tools]
        self.buffer = bytearray()
        self.starts: list[int] = []
        self.tokens: list[int] = []
        # Inside reasoning, a call starts only after the reasoning closes (`</think>`).
        self.armed = not opens_reasoning
        self.reasoning_close = dialect.markers.reasoning_close.encode()
        self.dead = False
        self.scan_from = 0

    def feed(self, token: int, raw: bytes) -> Any:
        return self.feed_many([token], [raw])

    def feed_many(self, tokens: list[int], raws: list[bytes]) -> Any:
        for token, raw in zip(tokens, raws):
            self.starts.append(len(self.buffer))
            self.tokens.append(token)
            self.buffer += raw
        if self.dead:
            return None
        window_from = max(0, self.scan_from - 24)
        if not self.armed:
            close = self.buffer.find(self.reasoning_close, window_from)
            if close == -1:
                self.scan_from = len(self.buffer)
                return None
            self.armed = True
            window_from = close + len(self.reasoning_close)
        match = self.dialect.trigger.search(self.buffer, window_from)
        if match:
            return self._switch(match)
        self.scan_from = len(self.buffer)
        return None

    def _switch(self, match: re.Match[bytes]) -> Any:
        at = match.start()
        first = max(i for i, s in enumerate(self.starts) if s <= at)
        lead = bytes(self.buffer[self.starts[first] : at])
        tail = bytes(self.buffer[match.end() :])
        try:
            lead_text, tail_text, matched = lead.decode("utf-8"), tail.decode("utf-8"), match.group(0).decode()
        except UnicodeDecodeError:
            return self._skip()
        if not self.dialect.tail_ok(matched, tail_text, self.names):
            return self._skip()
        gbnf = self.grammar.gbnf.replace("root ::= ", "root ::= " + (literal(lead_text) + " " if lead_text else ""), 1)
        sampler = self.build(gbnf, self.tokens[first:])
        if sampler is None:
            return self._skip()
        self.stats.grammar_triggers += 1
        return sampler

    def _skip(self) -> None:
        self.stats.grammar_skipped += 1
        self.dead = True  # stay unconstrained for the rest of the turn
        return None
