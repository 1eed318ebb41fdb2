"""A llama.cpp model and context on llama-cpp-python's low-level bindings.

`llama_cpp.Llama` hides what speculative decoding on a hybrid model needs: the recurrent-state
snapshots that let a rejected draft be rolled back (`n_rs_seq` in the context parameters), the MTP
layers (`load_mtp`) and a second, MTP-type context, and logits for every position of a verified batch.
So ribbit opens the model and context itself; the attribute and method names follow `Llama`'s
(`tokenize`, `detokenize`, `eval`, `input_ids`, `n_tokens`, `reset`, `ctx`) so the rest of the backend
and its saved states read the same.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from models.settings import Settings, env_name

# Positions per token in a llama_batch_ext entry (M-RoPE models read 4; text tokens use the first).
_POS_PER_TOKEN = 4
_backend_ready = False


# ggml's log levels (ggml.h): llama-cpp-python's own callback reads them one off and prints warnings
# (Gemma's "llama_kv_cache_iswa: ..." lines) as errors, which lands on the TUI's screen.
GGML_LOG_LEVEL_ERROR = 4
GGML_LOG_LEVEL_CONT = 5
_log_callback: Any = None  # kept alive: llama.cpp holds only the C pointer


def _install_log_filter(llama_cpp: Any) -> None:
    """Only llama.cpp's errors reach stderr (and the lines that continue them)."""
    global _log_callback
    import ctypes
    import sys

    last = [0]

    @llama_cpp.llama_log_callback
    def on_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        if level != GGML_LOG_LEVEL_CONT:
            last[0] = level
        if last[0] == GGML_LOG_LEVEL_ERROR:
            sys.stderr.write(text.decode("utf-8", "replace"))

    _log_callback = on_log
    llama_cpp.llama_log_set(on_log, ctypes.c_void_p(0))


# llama.cpp built natively on a Sapphire Rapids-class CPU (AMX_INT8) moves the weights into AMX buffers,
# and its AMX matrix multiply segfaults at the first prompt on some machines (ggml-org/llama.cpp#20824;
# on this project's 2-core Xeon VM, every model, 1 or 2 threads). Weights then stay in plain buffers:
# no AMX, and no repacking either (llama.cpp switches both with one flag). Set to 1 to keep them.
KEEP_AMX_ENV = env_name("llama_amx")


def amx_in_build(llama_cpp: Any) -> bool:
    """Whether this llama.cpp was compiled with AMX kernels (they run only where the CPU has AMX)."""
    return b"AMX_INT8 = 1" in llama_cpp.llama_print_system_info()


def extra_buffers_off(llama_cpp: Any) -> bool:
    """Whether ribbit loads models without llama.cpp's extra weight buffers (AMX, repacked), and so why."""
    return amx_in_build(llama_cpp) and not Settings.read().llama_amx


def _guarded(params: Any, llama_cpp: Any) -> Any:
    if extra_buffers_off(llama_cpp):
        params.use_extra_bufts = False
    return params


def model_params(llama_cpp: Any) -> Any:
    """llama.cpp's default model parameters, with the AMX guard above."""
    return _guarded(llama_cpp.llama_model_default_params(), llama_cpp)


def guard_llama_class() -> Callable[[], Any]:
    """Make the default model parameters `llama_cpp.Llama` starts from carry the AMX guard (its
    constructor takes no such option); returns the library's own, to put back (also when the guard was
    in place already)."""
    import llama_cpp.llama_cpp as bindings

    current = bindings.llama_model_default_params
    default: Callable[[], Any] = getattr(current, "library_default", current)

    def guarded() -> Any:
        return _guarded(default(), bindings)

    guarded.library_default = default  # type: ignore[attr-defined]
    bindings.llama_model_default_params = guarded
    return default


def open_for_logits(path: Path, n_ctx: int = 512) -> Any:
    """A GGUF loaded to read every position's logits (`ribbit quantize --verify` compares them), quietly:
    llama.cpp logs loading to fd 2 even with verbose=False in places."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        return open_llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, logits_all=True, verbose=False,
                          n_threads=max(1, os.cpu_count() or 1))
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def open_llama(**kwargs: Any) -> Any:
    """A `llama_cpp.Llama` loaded with the AMX guard. For checks and benchmarks that use `Llama`."""
    import llama_cpp
    import llama_cpp.llama_cpp as bindings

    previous = bindings.llama_model_default_params  # put back as found (a process may keep the guard on)
    guard_llama_class()
    try:
        return llama_cpp.Llama(**kwargs)
    finally:
        bindings.llama_model_default_params = previous


class MappedPages:
    """Drops this process's mapped pages of the model file, so that weights llama.cpp copied into its own
    buffers (repacked for faster kernels) are not counted twice in resident memory.

    llama.cpp maps the whole file and faults it in at once (MAP_POPULATE), then copies the tensors it
    repacks; the mapped pages of those stay resident, never read again: 1.5 GiB of FrogNano's 2.6 GiB
    Q4_K_M, on top of the copies. MADV_DONTNEED on the shared file mapping only unmaps pages from this
    process (the page cache keeps them); the ones still used fault back in when read. Done during the
    load (llama.cpp's progress callback) and once after it. Linux only; elsewhere nothing happens.
    """

    MADV_DONTNEED = 4
    STEP = 0.05  # of the load's progress between two trims

    def __init__(self, path: Path) -> None:
        self.path = os.path.realpath(path)
        self.last = -1.0
        self._madvise: Any = None
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            self._madvise = libc.madvise
            self._madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            self._madvise.restype = ctypes.c_int

    def ranges(self) -> list[tuple[int, int]]:
        found = []
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    parts = line.split(maxsplit=5)
                    if len(parts) == 6 and parts[5].rstrip("\n") == self.path:
                        low, high = parts[0].split("-")
                        found.append((int(low, 16), int(high, 16)))
        except OSError:
            return []
        return found

    def trim(self) -> None:
        if self._madvise is None:
            return
        for low, high in self.ranges():
            self._madvise(low, high - low, self.MADV_DONTNEED)

    def on_progress(self, progress: float) -> None:
        if progress - self.last >= self.STEP:
            self.last = progress
            self.trim()


def _init_backend() -> Any:
    global _backend_ready
    import llama_cpp
    import llama_cpp._logger  # noqa: F401 (installs its callback on import; ours replaces it below)

    if not _backend_ready:
        _install_log_filter(llama_cpp)
        llama_cpp.llama_backend_init()
        _backend_ready = True
    return llama_cpp


class _NextnCalls:
    """The staging C++ entry points (src/llama-ext.h) the MTP driver needs; not in the Python bindings."""

    def __init__(self, llama_cpp: Any) -> None:
        lib = llama_cpp.llama_cpp._lib  # noqa: SLF001
        self.set_embeddings = lib._Z26llama_set_embeddings_nextnP13llama_contextbb
        self.set_embeddings.argtypes = [ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool]
        self.set_embeddings.restype = None
        self.get_ith = lib._Z30llama_get_embeddings_nextn_ithP13llama_contexti
        self.get_ith.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        self.get_ith.restype = ctypes.POINTER(ctypes.c_float)


class LlamaRuntime:
    def __init__(
        self,
        path: Path,
        *,
        n_ctx: int,
        n_batch: int,
        n_threads: int,
        flash_attn: bool = False,
        type_kv: int = 1,
        seed: int = 0,
        n_rs_seq: int = 0,
        load_mtp: bool = False,
        repack: bool = True,
    ) -> None:
        llama_cpp = _init_backend()
        from llama_cpp import _internals

        self._llama_cpp = llama_cpp
        self.model_params = model_params(llama_cpp)
        self.model_params.load_mtp = load_mtp
        if not repack:  # weights used where they are mapped, no repacked copy (benchmarks compare the two)
            self.model_params.use_extra_bufts = False
        pages = MappedPages(path)

        @llama_cpp.llama_progress_callback
        def on_progress(progress: float, _user: ctypes.c_void_p) -> bool:
            pages.on_progress(progress)
            return True  # go on loading

        self.model_params.progress_callback = on_progress
        self._model = _internals.LlamaModel(path_model=str(path), params=self.model_params, verbose=False)
        pages.trim()
        self.params = self._context_params(n_ctx, n_batch, n_threads, flash_attn, type_kv, n_rs_seq)
        self._ctx = _internals.LlamaContext(model=self._model, params=self.params, verbose=False)
        self.n_batch = n_batch
        self._batch = _internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1, verbose=False)
        self.input_ids: np.ndarray = np.zeros((self.n_ctx(),), dtype=np.intc)
        self.n_tokens = 0
        self._seed = seed
        self.last_n_tokens_size = 64
        self.metadata: dict[str, str] = self._model.metadata()
        self._n_vocab = self._model.n_vocab()
        self.mtp: MtpContext | None = None
        self._pieces: dict[int, bytes] = {}  # token -> its text with special tokens as text (piece())

    def _context_params(self, n_ctx: int, n_batch: int, n_threads: int, flash_attn: bool, type_kv: int, n_rs_seq: int) -> Any:
        llama_cpp = self._llama_cpp
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = 1
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        params.type_k = type_kv
        params.type_v = type_kv
        params.n_rs_seq = n_rs_seq
        return params

    # -- what Llama offers, under the same names ------------------------------------------------

    @property
    def ctx(self) -> Any:
        return self._ctx.ctx

    def n_ctx(self) -> int:
        return int(self._llama_cpp.llama_n_ctx(self.ctx))

    def resize(self, n_ctx: int) -> None:
        """Make the context hold `n_ctx` tokens, keeping the stream: its state is captured, the old context
        freed, a new one made and the state put back (models.llama_state) — no token is evaluated again.
        The MTP head's context follows. RuntimeError when llama.cpp refuses; the old size is kept then."""
        from llama_cpp import _internals

        from models import llama_state

        tokens = [int(t) for t in self.input_ids[: self.n_tokens]]
        data = llama_state.capture(self)
        old = self.params
        self.params = self._context_params(n_ctx, self.n_batch, old.n_threads, old.flash_attn_type == self._llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                                           old.type_k, old.n_rs_seq)
        self._ctx.close()  # before the new one: the two caches never live at once
        try:
            self._ctx = _internals.LlamaContext(model=self._model, params=self.params, verbose=False)
        except (ValueError, RuntimeError) as exc:
            self.params = old
            self._ctx = _internals.LlamaContext(model=self._model, params=old, verbose=False)
            if not llama_state.put(self, data):
                raise RuntimeError(f"llama.cpp could not make a {n_ctx}-token context ({exc}) nor restore the old one") from None
            raise RuntimeError(f"llama.cpp could not make a {n_ctx}-token context: {exc}") from None
        if not llama_state.put(self, data):
            raise RuntimeError(f"llama.cpp refused the state of {len(tokens)} tokens in a {n_ctx}-token context")
        ids = np.zeros((self.n_ctx(),), dtype=np.intc)
        ids[: len(tokens)] = tokens
        self.input_ids = ids
        if self.mtp is not None:
            self.mtp.resize(self, n_ctx)

    def n_vocab(self) -> int:
        return self._n_vocab

    def token_bos(self) -> int:
        return self._model.token_bos()

    def token_eos(self) -> int:
        return self._model.token_eos()

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        return self._model.tokenize(text, add_bos, special)

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> bytes:
        return b"".join(self.piece(int(t), special) for t in tokens)

    def piece(self, token: int, special: bool = True) -> bytes:
        """One token's bytes (`special`: special tokens as their text), memoised: the decode loop asks for
        every sampled token. Pieces longer than 32 bytes come out whole — llama-cpp-python's detokenize
        drops them (a newline and 32 spaces of indentation is one token in SmolLM2's vocabulary)."""
        key = token if special else ~token
        found = self._pieces.get(key)
        if found is None:
            llama_cpp = self._llama_cpp
            size = 64
            while True:
                buffer = ctypes.create_string_buffer(size)
                n = llama_cpp.llama_token_to_piece(self._model.vocab, token, buffer, size, 0, special)
                if n >= 0:
                    break
                size = -n
            found = self._pieces[key] = buffer.raw[:n]
        return found

    def set_seed(self, seed: int) -> None:
        self._seed = seed

    def reset(self) -> None:
        self.n_tokens = 0

    @property
    def is_recurrent(self) -> bool:
        model = self._model.model
        return bool(self._llama_cpp.llama_model_is_recurrent(model) or self._llama_cpp.llama_model_is_hybrid(model))

    @property
    def n_layer_nextn(self) -> int:
        return int(self._llama_cpp.llama_model_n_layer_nextn(self._model.model))

    @property
    def n_rs_seq(self) -> int:
        return int(self._llama_cpp.llama_n_rs_seq(self.ctx))

    def set_threads(self, n_threads: int) -> None:
        self._llama_cpp.llama_set_n_threads(self.ctx, n_threads, n_threads)
        self.params.n_threads = self.params.n_threads_batch = n_threads

    def eval(self, tokens: Sequence[int]) -> None:
        """Append `tokens` to the stream; logits of the last one only."""
        self._decode(tokens, all_logits=False)

    def eval_all(self, tokens: Sequence[int]) -> None:
        """Append `tokens` in one batch with logits for every position (verifying drafts)."""
        if len(tokens) > self.n_batch:
            raise RuntimeError(f"a verified batch of {len(tokens)} exceeds the batch size {self.n_batch}")
        self._decode(tokens, all_logits=True)

    def _decode(self, tokens: Sequence[int], all_logits: bool) -> None:
        # Anything past n_tokens (a reset) goes first, as Llama.eval does.
        self._ctx.kv_cache_seq_rm(0, self.n_tokens, -1)
        for start in range(0, len(tokens), self.n_batch):
            chunk = list(tokens[start : start + self.n_batch])
            n_past = self.n_tokens
            self._batch.set_batch(batch=chunk, n_past=n_past, logits_all=all_logits)
            self._ctx.decode(self._batch)  # RuntimeError on failure
            if self.mtp is not None:
                self.mtp.follow(self, chunk, n_past)
            self.input_ids[n_past : n_past + len(chunk)] = chunk
            self.n_tokens += len(chunk)

    def logits(self, index: int) -> np.ndarray:
        """A view of the logits at output `index` of the last decode (-1: the last)."""
        pointer = self._llama_cpp.llama_get_logits_ith(self.ctx, index)
        return np.ctypeslib.as_array(pointer, shape=(self._n_vocab,))

    def truncate(self, n_keep: int) -> None:
        """Drop the stream after its first `n_keep` tokens: the KV cells, and the recurrent state rolled
        back to a snapshot llama.cpp kept (n_rs_seq), never re-evaluated. RuntimeError if it cannot."""
        if n_keep >= self.n_tokens:
            return
        memory = self._llama_cpp.llama_get_memory(self.ctx)
        if not self._llama_cpp.llama_memory_seq_rm(memory, 0, n_keep, -1):
            raise RuntimeError(f"llama.cpp cannot roll the context back from {self.n_tokens} to {n_keep} tokens")
        if self.mtp is not None:
            self.mtp.truncate(n_keep)
        self.n_tokens = n_keep

    def sampler(self, temp: float, top_p: float, top_k: int, min_p: float, grammar: Any = None) -> Any:
        """A sampler chain in llama-cpp-python's order (penalties, grammar, top-k, typical, top-p, min-p,
        temperature, dist); `grammar` is a llama_sampler that joins the chain and stays owned by it."""
        from llama_cpp._internals import LlamaSampler

        sampler = LlamaSampler()
        sampler.add_penalties(n_vocab=self._n_vocab, penalty_last_n=self.last_n_tokens_size,
                              penalty_repeat=1.0, penalty_freq=0.0, penalty_present=0.0)
        if grammar is not None:
            self._llama_cpp.llama_sampler_chain_add(sampler.sampler, grammar)
        if temp == 0.0:
            sampler.add_greedy()
        else:
            sampler.add_top_k(top_k)
            sampler.add_typical(1.0, 1)
            sampler.add_top_p(top_p, 1)
            sampler.add_min_p(min_p, 1)
            sampler.add_temp(temp)
            sampler.add_dist(self._seed)
        return sampler

    # -- MTP ------------------------------------------------------------------------------------

    def open_mtp(self, n_threads: int, type_kv: int, flash_attn: bool) -> MtpContext:
        """The model's MTP head as a second context that follows this one (see MtpContext)."""
        self.mtp = MtpContext(self, n_threads=n_threads, type_kv=type_kv, flash_attn=flash_attn)
        return self.mtp

    def close_mtp(self) -> None:
        if self.mtp is not None:
            self.mtp.close()
            self.mtp = None

    def close(self) -> None:
        self.close_mtp()
        self._batch.close()
        self._ctx.close()
        self._model.close()


class MtpContext:
    """FrogNano's multi-token-prediction head as llama.cpp's MTP context type.

    The head reads, at position p, the token x_p and the target's final hidden state after x_{p-1}
    (which predicted x_p), and predicts x_{p+1}; its own hidden output chains to the next draft step.
    It has its own KV cache (its one attention layer), so it must see every token the target evaluates:
    `follow()` feeds it each target batch, paired with the target's hidden states shifted by one.
    """

    def __init__(self, target: LlamaRuntime, *, n_threads: int, type_kv: int, flash_attn: bool) -> None:
        from llama_cpp import _internals

        llama_cpp = target._llama_cpp  # noqa: SLF001
        self._llama_cpp = llama_cpp
        self.calls = _NextnCalls(llama_cpp)
        params = target._context_params(target.n_ctx(), target.n_batch, n_threads, flash_attn, type_kv, 0)  # noqa: SLF001
        params.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        self._params = params
        self._ctx = _internals.LlamaContext(model=target._model, params=params, verbose=False)  # noqa: SLF001
        self.n_embd = int(llama_cpp.llama_model_n_embd_out(target._model.model))  # noqa: SLF001
        self.n_vocab = target.n_vocab()
        # The target writes its hidden state for every token of a batch; the head only for outputs.
        self.calls.set_embeddings(target.ctx, True, False)
        self.calls.set_embeddings(self.ctx, True, True)
        self._batch = llama_cpp.llama_batch_ext_init(self.ctx)
        self._pos = (llama_cpp.llama_pos * _POS_PER_TOKEN)()
        self.pending_h = np.zeros(self.n_embd, dtype=np.float32)  # the target's hidden after the last token
        self.n_tokens = 0
        self._verify_h: np.ndarray | None = None
        self._verify_from = 0

    @property
    def ctx(self) -> Any:
        return self._ctx.ctx

    def _hidden(self, ctx: Any, index: int) -> np.ndarray:
        pointer = self.calls.get_ith(ctx, index)
        if not pointer:
            raise RuntimeError("llama.cpp returned no hidden state for the MTP head")
        return np.ctypeslib.as_array(pointer, shape=(self.n_embd,))

    def _run(self, tokens: Sequence[int], hiddens: Sequence[np.ndarray], first_pos: int, outputs: bool) -> None:
        llama_cpp = self._llama_cpp
        batch = self._batch
        llama_cpp.llama_batch_ext_clear(batch)
        for i, (token, hidden) in enumerate(zip(tokens, hiddens)):
            index = llama_cpp.llama_batch_ext_add_token(batch, 0, token)
            if index < 0:
                raise RuntimeError(f"the MTP batch refused token {i} (error {index})")
            self._pos[0] = first_pos + i
            llama_cpp.llama_batch_ext_set_pos(batch, index, self._pos)
            embd = llama_cpp.llama_embd(hidden.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, self.n_embd)
            llama_cpp.llama_batch_ext_set_embd_token(batch, index, embd)
            if outputs:
                llama_cpp.llama_batch_ext_set_output_logits(batch, index, True)
        code = llama_cpp.llama_process(self.ctx, llama_cpp.LLAMA_PROCESS_TYPE_DECODE, batch)
        if code != 0:
            raise RuntimeError(f"the MTP head failed to decode (llama_process returned {code})")

    def follow(self, target: LlamaRuntime, tokens: Sequence[int], first_pos: int) -> None:
        """The target just evaluated `tokens` at `first_pos`...: give the head the same positions."""
        if first_pos != self.n_tokens:  # the head lost track (a restored state without its own): start anew
            self.clear()
        n = len(tokens)
        hidden_rows = np.stack([self._hidden(target.ctx, i).copy() for i in range(n)])
        paired = [self.pending_h.copy(), *hidden_rows[:-1]]
        self._run(tokens, paired, first_pos, outputs=False)
        self._verify_h, self._verify_from = hidden_rows, first_pos
        self.pending_h = hidden_rows[-1].copy()
        self.n_tokens = first_pos + n

    def resize(self, target: LlamaRuntime, n_ctx: int) -> None:
        """Follow the target into a context of `n_ctx` tokens, keeping the head's cache where llama.cpp
        takes it back (else the head starts again, as after a restored state)."""
        from llama_cpp import _internals

        from models import llama_state

        try:
            data: llama_state.StateData | None = llama_state.capture(self)
        except (RuntimeError, OSError, ValueError):
            data = None
        params = target._context_params(n_ctx, target.n_batch, self._params.n_threads,  # noqa: SLF001
                                        self._params.flash_attn_type == self._llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                                        self._params.type_k, 0)
        params.ctx_type = self._llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        self._llama_cpp.llama_batch_ext_free(self._batch)
        self._ctx.close()
        self._ctx = _internals.LlamaContext(model=target._model, params=params, verbose=False)  # noqa: SLF001
        self._params = params
        self.calls.set_embeddings(target.ctx, True, False)
        self.calls.set_embeddings(self.ctx, True, True)
        self._batch = self._llama_cpp.llama_batch_ext_init(self.ctx)
        if data is None or not llama_state.put(self, data):
            self.clear()

    def truncate(self, n_keep: int) -> None:
        memory = self._llama_cpp.llama_get_memory(self.ctx)
        self._llama_cpp.llama_memory_seq_rm(memory, 0, n_keep, -1)
        if self._verify_h is not None and self._verify_from < n_keep <= self._verify_from + len(self._verify_h):
            self.pending_h = self._verify_h[n_keep - 1 - self._verify_from].copy()
        self.n_tokens = min(self.n_tokens, n_keep)

    def draft(self, last_token: int, position: int, n_max: int, p_min: float) -> list[int]:
        """Up to `n_max` greedy drafts after `last_token` (sampled, not yet evaluated, at `position`);
        stops at a draft the head itself gives less than `p_min`. The head's KV for the drafts is removed."""
        drafts: list[int] = []
        token, hidden = last_token, self.pending_h
        try:
            for step in range(n_max):
                self._run([token], [hidden], position + step, outputs=True)
                logits = np.ctypeslib.as_array(self._llama_cpp.llama_get_logits_ith(self.ctx, 0), shape=(self.n_vocab,))
                best = int(logits.argmax())
                if p_min > 0.0:
                    shifted = np.exp(logits - logits[best])
                    if 1.0 / float(shifted.sum()) < p_min:
                        break
                drafts.append(best)
                token, hidden = best, self._hidden(self.ctx, 0).copy()
        finally:
            memory = self._llama_cpp.llama_get_memory(self.ctx)
            self._llama_cpp.llama_memory_seq_rm(memory, 0, position, -1)
        return drafts

    def clear(self) -> None:
        self._llama_cpp.llama_memory_clear(self._llama_cpp.llama_get_memory(self.ctx), True)
        self.pending_h = np.zeros(self.n_embd, dtype=np.float32)
        self.n_tokens = 0
        self._verify_h = None

    def close(self) -> None:
        if self._batch is not None:
            self._llama_cpp.llama_batch_ext_free(self._batch)
            self._batch = None
        self._ctx.close()
