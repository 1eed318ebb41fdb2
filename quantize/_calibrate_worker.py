"""Computes an importance matrix: runs a GGUF model over text through llama.cpp and, from its eval
callback, sums the squared input activations of every weight matrix multiply (see quantize.imatrix).

Usage: python -m quantize._calibrate_worker MODEL OUT TOKENS DATASET, with the text files to read on
stdin, NUL-separated, in the order to read them. Reports on stdout as quantize.worker expects.

The text is cut into chunks of the model's context (at most CHUNK tokens), each evaluated from an empty
cache and opening with BOS where the model uses one, as llama-imatrix does. Logits are asked for at
every position: llama.cpp otherwise runs the last layer's attention output and feed-forward only for
the positions that give logits, and those weights would see one token a chunk.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from quantize.imatrix import ImportanceMatrix

CHUNK = 512  # tokens a chunk, llama-imatrix's default; less when the model's context is shorter
MIN_ROWS = 16  # llama-imatrix skips matrix multiplies over fewer tokens; every batch here has more
_LOGITS_BYTES = 256 * 1024 * 1024  # a batch's logits (n_tokens x n_vocab floats) stay under this: at FrogNano's
# vocabulary, 270 tokens a batch, so a model larger than the RAM is read from disk once per 256 tokens
_GGML_TYPE_F32 = 0
_GGML_TYPE_I32 = 26


class GgmlTensor(ctypes.Structure):
    """struct ggml_tensor of the ggml that llama-cpp-python 0.3.36 ships (ggml.h)."""


GgmlTensor._fields_ = [
    ("type", ctypes.c_int),
    ("buffer", ctypes.c_void_p),
    ("ne", ctypes.c_int64 * 4),
    ("nb", ctypes.c_size_t * 4),
    ("op", ctypes.c_int),
    ("op_params", ctypes.c_int32 * 16),
    ("flags", ctypes.c_int32),
    ("src", ctypes.POINTER(GgmlTensor) * 10),
    ("view_src", ctypes.c_void_p),
    ("view_offs", ctypes.c_size_t),
    ("data", ctypes.c_void_p),
    ("name", ctypes.c_char * 64),
    ("extra", ctypes.c_void_p),
    ("padding", ctypes.c_char * 8),
]


class _Ggml:
    """The few ggml functions the callback needs, from the library llama-cpp-python loaded."""

    def __init__(self) -> None:
        import llama_cpp._ggml

        lib = llama_cpp._ggml.libggml  # noqa: SLF001
        lib.ggml_op_name.restype = ctypes.c_char_p
        lib.ggml_op_name.argtypes = [ctypes.c_int]
        lib.ggml_backend_buffer_is_host.restype = ctypes.c_bool
        lib.ggml_backend_buffer_is_host.argtypes = [ctypes.c_void_p]
        lib.ggml_nbytes.restype = ctypes.c_size_t
        lib.ggml_nbytes.argtypes = [ctypes.c_void_p]
        lib.ggml_backend_tensor_get.restype = None
        lib.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
        self.lib = lib
        # op numbers by name: the enum moves between ggml versions, the names do not
        names: dict[str, int] = {}
        for op in range(256):
            name = lib.ggml_op_name(op)
            if not name or name == b"COUNT":
                break
            names[name.decode()] = op
        self.mul_mat, self.mul_mat_id = names["MUL_MAT"], names["MUL_MAT_ID"]

    def array(self, t: GgmlTensor, dtype: type, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
        """`t`'s data as an array (a view when it is in host memory, else a copy)."""
        span = sum((n - 1) * s for n, s in zip(shape, strides)) + np.dtype(dtype).itemsize
        if self.lib.ggml_backend_buffer_is_host(t.buffer):
            base: Any = (ctypes.c_char * span).from_address(t.data)
        else:
            base = ctypes.create_string_buffer(self.lib.ggml_nbytes(ctypes.addressof(t)))
            self.lib.ggml_backend_tensor_get(ctypes.addressof(t), base, 0, len(base))
        return np.ndarray(shape, dtype=dtype, buffer=base, strides=strides)


def weight_name(t: GgmlTensor) -> str | None:
    """The model weight a matrix multiply reads, or None when src0 is not one (the attention's K·Q,
    a view): llama-quantize looks entries up by the GGUF tensor name."""
    raw = t.name.split(b"#")[1] if b"#" in t.name else t.name  # a copy on another backend: CUDA0#name#0
    name = raw.decode("utf-8", "replace")
    return name if name.startswith("blk.") and name.endswith(".weight") else None


class Collector:
    def __init__(self, ggml: _Ggml, matrix: ImportanceMatrix) -> None:
        self.ggml, self.matrix = ggml, matrix
        self.error: str | None = None
        self.callback = _eval_callback(self._on_node)  # kept alive: llama.cpp holds only the C pointer

    def _on_node(self, pointer: int, ask: bool) -> bool:
        t = GgmlTensor.from_address(pointer)
        ggml = self.ggml
        if t.op not in (ggml.mul_mat, ggml.mul_mat_id):
            return False if ask else True
        w, x = t.src[0].contents, t.src[1].contents
        name = weight_name(w)
        if ask:
            return name is not None and x.type == _GGML_TYPE_F32 and (t.op == ggml.mul_mat_id or x.ne[1] >= MIN_ROWS)
        try:
            assert name is not None and x.nb[0] == 4
            if t.op == ggml.mul_mat:
                xs = ggml.array(x, np.float32, (x.ne[3], x.ne[2], x.ne[1], x.ne[0]), (x.nb[3], x.nb[2], x.nb[1], x.nb[0]))
                self.matrix.add_dense(name, xs, int(w.ne[2]), int(w.ne[3]))
            else:
                ids = t.src[2].contents  # (n_used, n_tokens) int32, not contiguous
                experts = ggml.array(ids, np.int32, (ids.ne[1], ids.ne[0]), (ids.nb[1], ids.nb[0]))
                xs = ggml.array(x, np.float32, (x.ne[2], x.ne[1], x.ne[0]), (x.nb[2], x.nb[1], x.nb[0]))
                self.matrix.add_routed(name, xs, experts, int(w.ne[2]))
        except Exception as exc:  # stop the graph: an exception must not cross into C
            self.error = f"{name}: {type(exc).__name__}: {exc}"
            return False
        return True


def _eval_callback(handler: Any) -> Any:
    import llama_cpp

    @llama_cpp.ggml_backend_sched_eval_callback
    def callback(pointer: int, ask: bool, _user: ctypes.c_void_p) -> bool:
        return handler(pointer, ask)

    return callback


def _quiet_logs(llama_cpp: Any) -> Any:
    """llama.cpp's log goes nowhere but its errors, which become ERROR lines."""

    @llama_cpp.llama_log_callback
    def on_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        if level == 4:  # GGML_LOG_LEVEL_ERROR
            print("ERROR " + text.decode("utf-8", "replace").strip(), flush=True)

    llama_cpp.llama_log_set(on_log, ctypes.c_void_p(0))
    return on_log


def read_tokens(model: Any, files: list[str], budget: int) -> Iterator[list[int]]:
    """The files' tokens, file after file, until `budget` tokens are out (the text of a file is cut
    before tokenising to what the rest of the budget can use)."""
    left = budget
    for path in files:
        if left <= 0:
            return
        try:
            text = Path(path).read_text(encoding="utf-8")[: left * 16]
        except (OSError, UnicodeDecodeError):
            continue  # changed since the listing: the others still count
        tokens = model.tokenize((text + "\n\n").encode("utf-8"), False, False)[:left]
        left -= len(tokens)
        yield tokens


def plan_chunks(tokens: list[int], chunk: int, bos: int | None) -> list[list[int]]:
    """Chunks of `chunk` tokens (BOS first where the model uses one); a tail too short to count goes."""
    body = chunk - (bos is not None)
    chunks = [([bos] if bos is not None else []) + tokens[i : i + body] for i in range(0, len(tokens), body)]
    return [c for c in chunks if len(c) >= MIN_ROWS]


def batches(chunk: list[int], n_batch: int) -> list[list[int]]:
    """Even batches of at most n_batch tokens (so none falls under MIN_ROWS when the chunk does not)."""
    n = -(-len(chunk) // n_batch)
    size = -(-len(chunk) // n)
    return [chunk[i : i + size] for i in range(0, len(chunk), size)]


def main(argv: list[str]) -> int:
    import llama_cpp
    from llama_cpp import _internals

    model_path, out, budget, dataset = argv[0], Path(argv[1]), int(argv[2]), argv[3]
    files = [f for f in sys.stdin.read().split("\0") if f]
    keep_log = _quiet_logs(llama_cpp)  # noqa: F841 (kept alive while llama.cpp may log)
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    # no repacked or AMX weight buffers: the source is F16/BF16 (nothing to repack), and llama.cpp's AMX
    # kernels crash on some CPUs (models/llama_runtime.py says more)
    params.use_extra_bufts = False
    try:
        model = _internals.LlamaModel(path_model=model_path, params=params, verbose=False)
    except ValueError as exc:
        print(f"ERROR llama.cpp could not load the model ({exc})", flush=True)
        return 1
    try:
        return _run(llama_cpp, _internals, model, files, budget, dataset, out)
    finally:
        model.close()  # explicitly, after the context: left to the garbage collector, the order is not kept


def _run(llama_cpp: Any, _internals: Any, model: Any, files: list[str], budget: int, dataset: str, out: Path) -> int:
    n_ctx_train = int(llama_cpp.llama_model_n_ctx_train(model.model))
    chunk = max(MIN_ROWS, min(CHUNK, n_ctx_train, budget))
    vocab = model.vocab
    bos = int(llama_cpp.llama_vocab_bos(vocab)) if llama_cpp.llama_vocab_get_add_bos(vocab) else None
    stream = [t for tokens in read_tokens(model, files, budget) for t in tokens]
    wanted = budget - (bos is not None) * -(-budget // chunk)  # the budget counts each chunk's BOS
    chunks = plan_chunks(stream[:wanted], chunk, bos)
    total = sum(len(c) for c in chunks)
    if not chunks:
        print(f"ERROR the text makes {len(stream)} tokens, fewer than the {MIN_ROWS} one chunk needs", flush=True)
        return 1
    if len(stream) < wanted:
        print(f"NOTE the text holds only {total:,} tokens of the {budget:,} asked for: calibrating on all of it",
              flush=True)
    n_batch = max(MIN_ROWS, min(chunk, _LOGITS_BYTES // (4 * model.n_vocab())))
    matrix = ImportanceMatrix(datasets=[dataset], chunk_size=chunk)
    collector = Collector(_Ggml(), matrix)
    ctx_params = llama_cpp.llama_context_default_params()
    ctx_params.n_ctx = chunk
    ctx_params.n_batch = ctx_params.n_ubatch = n_batch
    ctx_params.n_seq_max = 1
    ctx_params.n_threads = ctx_params.n_threads_batch = os.cpu_count() or 1
    ctx_params.cb_eval = collector.callback
    ctx = _internals.LlamaContext(model=model, params=ctx_params, verbose=False)
    batch = _internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1, verbose=False)
    try:
        code = _evaluate(llama_cpp, ctx, batch, chunks, n_batch, collector, total)
    finally:
        batch.close()
        ctx.close()
    if code == 0:
        matrix.save(out)
    return code


def _evaluate(llama_cpp: Any, ctx: Any, batch: Any, chunks: list[list[int]], n_batch: int, collector: Collector,
              total: int) -> int:
    done = 0
    print(f"PROGRESS 0 {total}", flush=True)
    for tokens in chunks:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx.ctx), True)
        n_past = 0
        for part in batches(tokens, n_batch):
            batch.set_batch(batch=part, n_past=n_past, logits_all=True)
            try:
                ctx.decode(batch)
            except RuntimeError as exc:
                print(f"ERROR {collector.error or exc}", flush=True)
                return 1
            if collector.error:
                print(f"ERROR {collector.error}", flush=True)
                return 1
            n_past += len(part)
            done += len(part)
            print(f"PROGRESS {done} {total}", flush=True)
        collector.matrix.chunk_count += 1
    if not collector.matrix.entries:
        print("ERROR llama.cpp ran no matrix multiply over a model weight", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
