"""Runs llama_model_quantize in a child process.

A child keeps llama.cpp's aborts, its memory and its global log hook away from the caller. It
reports on stdout, one line each: ``PROGRESS i n`` per tensor, ``ERROR text`` for llama.cpp errors.
Usage: python -m quantize._quantize_worker [--requantize] [--cover] IN OUT FTYPE_INT [IMATRIX]
(--requantize: the input is itself quantised, e.g. the embedded Q4_1 model made Q8_0. --cover: the type
needs a matrix for every weight, and the weights IMATRIX lacks are stored as Q4_K instead.)
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from pathlib import Path
from typing import Any

_TENSOR_LINE = re.compile(rb"^\[\s*(\d+)/\s*(\d+)\]")


def main(argv: list[str]) -> int:
    import llama_cpp

    requantize = "--requantize" in argv
    cover = "--cover" in argv
    argv = [a for a in argv if a not in ("--requantize", "--cover")]
    src, dst, ftype = argv[0], argv[1], int(argv[2])
    imatrix_path = Path(argv[3]) if len(argv) > 3 else None

    @llama_cpp.llama_log_callback
    def on_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        m = _TENSOR_LINE.match(text)
        if m:
            print(f"PROGRESS {int(m.group(1))} {int(m.group(2))}", flush=True)
        elif level == 4:  # GGML_LOG_LEVEL_ERROR (ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5)
            print("ERROR " + text.decode("utf-8", "replace").strip(), flush=True)

    llama_cpp.llama_log_set(on_log, ctypes.c_void_p(0))
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = requantize
    params.nthread = os.cpu_count() or 1
    # bound llama.cpp's conversion buffers (default 8 GiB) so a laptop keeps its memory
    params.max_buf_size = 256 * 1024 * 1024
    keep_alive = []
    if imatrix_path is not None:
        from quantize.errors import QuantizeError
        from quantize.imatrix import load_imatrix

        try:
            entries = load_imatrix(imatrix_path)
        except QuantizeError as exc:
            print(f"ERROR {exc}", flush=True)
            return 1
        arr = (llama_cpp.llama_model_imatrix_data * (len(entries) + 1))()
        for i, (name, values) in enumerate(entries.items()):
            name_b = name.encode()
            buf = (ctypes.c_float * values.size).from_buffer_copy(values.tobytes())
            keep_alive += [name_b, buf]
            arr[i].name, arr[i].data, arr[i].size = name_b, ctypes.cast(buf, ctypes.POINTER(ctypes.c_float)), values.size
        arr[len(entries)].name = None  # terminator
        keep_alive.append(arr)
        params.imatrix = ctypes.cast(arr, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
        if cover:
            types = _uncovered(llama_cpp, Path(src), entries)
            keep_alive.append(types)
            params.tt_overrides = ctypes.cast(types, ctypes.POINTER(llama_cpp.llama_model_tensor_override))
        overrides = _provenance(llama_cpp, imatrix_path, len(entries))
        keep_alive.append(overrides)
        params.kv_overrides = ctypes.cast(overrides, ctypes.POINTER(llama_cpp.llama_model_kv_override))
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    return 0 if rc == 0 else 1


_GGML_TYPE_Q4_K = 12


def _uncovered(llama_cpp: Any, src: Path, entries: dict[str, Any]) -> Any:
    """Type overrides for the block weights the matrix has no entry for (FrogNano's MTP block, which a
    forward pass does not run): llama.cpp refuses the low-bit types that need a matrix for them, so they
    are stored as Q4_K, which does not."""
    from gguf import GGUFReader

    names = [t.name for t in GGUFReader(src).tensors
             if t.name.startswith("blk.") and t.name.endswith(".weight") and len(t.shape) >= 2
             and "_norm" not in t.name and "conv1d" not in t.name and t.name not in entries]
    if names:
        print(f"NOTE {len(names)} weights the calibration did not reach ({names[0]}...) are stored as Q4_K", flush=True)
    arr = (llama_cpp.llama_model_tensor_override * (len(names) + 1))()
    for item, name in zip(arr, names):
        item.pattern = ("^" + re.escape(name) + "$").encode()
        item.type = _GGML_TYPE_Q4_K
    arr[len(names)].pattern = None  # terminator
    arr[len(names)].type = llama_cpp.GGML_TYPE_COUNT
    return arr


def _provenance(llama_cpp: Any, path: Path, n_entries: int) -> Any:
    """The keys llama-quantize writes into a model quantised with a matrix (quantize.imatrix.*), so the
    file tells what it was calibrated on."""
    datasets, chunks = [], 0
    with path.open("rb") as fh:
        if fh.read(4) == b"GGUF":
            from quantize.imatrix import read_imatrix

            found = read_imatrix(path)
            datasets, chunks = found.datasets, found.chunk_count
    values: list[tuple[str, str | int]] = [("quantize.imatrix.file", path.name), ("quantize.imatrix.entries_count", n_entries)]
    if datasets:
        values.append(("quantize.imatrix.dataset", datasets[0]))
    if chunks:
        values.append(("quantize.imatrix.chunks_count", chunks))
    arr = (llama_cpp.llama_model_kv_override * (len(values) + 1))()
    for item, (key, value) in zip(arr, values):
        item.key = key.encode()
        if isinstance(value, str):
            item.tag = llama_cpp.LLAMA_KV_OVERRIDE_TYPE_STR
            item.value.val_str = value.encode("utf-8")[:127]
        else:
            item.tag = llama_cpp.LLAMA_KV_OVERRIDE_TYPE_INT
            item.value.val_i64 = value
    arr[len(values)].key = b""  # terminator: an empty key
    return arr


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
