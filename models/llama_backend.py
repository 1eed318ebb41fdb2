"""llama.cpp in-process (llama-cpp-python), driven as an append-only token stream.

The backend keeps the exact tokens it has evaluated — prompt tokens and the sampled tokens
themselves — and each turn evaluates only what is new: the rest of the last turn's closing
(`<|im_end|>\\n`), the tool results and the next generation prompt. History is never re-rendered,
which is what makes FrogNano's hybrid (non-rewindable) architecture usable on a CPU.
"""

from __future__ import annotations

import codecs
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from models.base import (
    Chunk, ContextFull, GenerationRequest, ModelError, ModelInfo, PrefillProgress, TextChunk, TurnEnd, Usage,
)
from models.chat import ChatMessage, ToolSpec
from models.chat_template import ChatTemplate

GGUF_MAGIC = b"GGUF"
# The assistant turn the backend generated itself: its tokens are already in the stream.
_GENERATED = "<generated assistant turn>"

FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    32: "BF16",
}


def available_memory() -> int | None:
    """Bytes the kernel says can be allocated without swapping (MemAvailable), if known."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


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


def fingerprint(message: ChatMessage) -> str:
    return message.model_dump_json()


class LlamaCppModel:
    def __init__(
        self,
        path: Path,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        n_batch: int = 256,
        temperature: float = 0.7,
        top_p: float = 0.8,
        top_k: int = 20,
        min_p: float = 0.0,
        seed: int = 0,
    ) -> None:
        check_model_file(path)
        try:
            import llama_cpp
        except ImportError as exc:  # a broken install, not a user error
            raise ModelError(f"llama-cpp-python is not usable: {exc}") from None
        threads = n_threads or max(1, os.cpu_count() or 1)
        try:
            self.llm = llama_cpp.Llama(
                model_path=str(path), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, n_threads=threads,
                n_threads_batch=threads, seed=seed, verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelError(f"llama.cpp cannot load {path.name}: {exc}") from None
        self.sampling = dict(temp=temperature, top_p=top_p, top_k=top_k, min_p=min_p)
        self.n_batch = n_batch
        meta = dict(self.llm.metadata)
        arch = meta.get("general.architecture", "")
        self.template = ChatTemplate(
            meta.get("tokenizer.chat_template"),
            bos_token=self._token_text(self.llm.token_bos()),
            eos_token=self._token_text(self.llm.token_eos()),
        )
        file_type = meta.get("general.file_type")
        self.info = ModelInfo(
            name=meta.get("general.name") or path.stem,
            path=str(path),
            quantization=FILE_TYPES.get(int(file_type), f"type {file_type}") if file_type else None,
            architecture=arch or None,
            dialect=self.template.dialect,
            context_length=self.llm.n_ctx(),
            opens_reasoning=self.template.opens_reasoning,
        )
        self.stop_ids = {self.llm.token_eos(), *self._tokenize(self.template.turn_close)}
        self._close_tokens = self._tokenize(self.template.turn_close + self.template.turn_end)
        self._consumed: list[str] = []
        self._pending: list[int] = []

    # -- ChatModel ------------------------------------------------------------------------------

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        new_tokens = self._tokens_to_append(request.messages, request.tools)
        cached = self.llm.n_tokens
        if cached + len(new_tokens) + 1 >= self.info.context_length:
            raise ContextFull(
                f"the prompt needs {cached + len(new_tokens)} tokens but the context holds {self.info.context_length}"
            )
        usage = Usage(prompt_tokens=cached + len(new_tokens), cached_tokens=cached, evaluated_tokens=len(new_tokens))
        started = time.perf_counter()
        for done in range(0, len(new_tokens), self.n_batch):
            if request.should_stop():
                # What was not evaluated stays pending; the turn counts as an empty one.
                self._pending = list(new_tokens[done:]) + self._close_tokens
                usage.evaluated_tokens = done
                usage.prefill_s = time.perf_counter() - started
                yield TurnEnd(finish_reason="cancelled", usage=usage)
                return
            self._eval(new_tokens[done : done + self.n_batch])
            yield PrefillProgress(done=min(done + self.n_batch, len(new_tokens)), total=len(new_tokens))
        usage.prefill_s = time.perf_counter() - started
        started = time.perf_counter()
        finish = "stop"
        sampler = self.llm._init_sampler(**self.sampling)  # noqa: SLF001 — one sampler per turn keeps its state
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        produced = 0
        self._pending = list(self._close_tokens)
        while True:
            if request.should_stop():
                finish = "cancelled"
                break
            if produced >= request.max_tokens:
                finish = "length"
                break
            if self.llm.n_tokens + len(self._close_tokens) >= self.info.context_length:
                finish = "context"
                break
            token = sampler.sample(self.llm._ctx, -1)  # noqa: SLF001
            produced += 1
            if token in self.stop_ids:
                break
            self._eval([token])
            piece = decoder.decode(self.llm.detokenize([token], special=True))
            if piece:
                yield TextChunk(piece)
        tail = decoder.decode(b"", final=True)
        if tail:
            yield TextChunk(tail)
        usage.completion_tokens = produced
        usage.decode_s = time.perf_counter() - started
        self._consumed = [fingerprint(m) for m in request.messages] + [_GENERATED]
        yield TurnEnd(finish_reason=finish, usage=usage)  # type: ignore[arg-type]

    def context_used(self) -> int:
        return self.llm.n_tokens + len(self._pending)

    def close(self) -> None:
        self.llm.close()

    # -- the token stream -----------------------------------------------------------------------

    def _tokens_to_append(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> list[int]:
        """Only the new tokens when the conversation extends what was evaluated; else a fresh render."""
        prints = [fingerprint(m) for m in messages]
        if self._consumed and self._extends(messages, prints):
            new = list(messages[len(self._consumed) :])
            text = self.template.delta(new, list(tools))
            return self._pending + self._tokenize(text)
        self.reset()
        text = self.template.render_conversation(list(messages), list(tools))
        return self._tokenize(text, bos=not (self.template.bos_token and text.startswith(self.template.bos_token)))

    def _extends(self, messages: Sequence[ChatMessage], prints: list[str]) -> bool:
        if len(messages) <= len(self._consumed):
            return False
        for index, seen in enumerate(self._consumed):
            if seen == _GENERATED:
                if messages[index].role != "assistant":
                    return False
            elif prints[index] != seen:
                return False
        return True

    def reset(self) -> None:
        self.llm.reset()
        self._consumed = []
        self._pending = []

    def _eval(self, tokens: Sequence[int]) -> None:
        try:
            self.llm.eval(tokens)
        except RuntimeError as exc:
            raise ModelError(f"llama.cpp failed while evaluating: {exc}") from None

    def _tokenize(self, text: str, bos: bool = False) -> list[int]:
        if not text:
            return []
        return self.llm.tokenize(text.encode("utf-8"), add_bos=bos, special=True)

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self.llm.detokenize([token], special=True).decode("utf-8", "replace")
