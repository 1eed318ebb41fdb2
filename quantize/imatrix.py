"""Read an importance matrix (llama-imatrix's GGUF output, or its legacy .dat) into the
per-tensor float arrays llama_model_quantize takes, normalised the way llama-quantize does."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from quantize.errors import QuantizeError


def load_imatrix(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise QuantizeError("missing imatrix file", path)
    with path.open("rb") as fh:
        magic = fh.read(4)
    data = _load_gguf(path) if magic == b"GGUF" else _load_legacy(path)
    if not data:
        raise QuantizeError("imatrix holds no entries", path)
    return data


def _load_gguf(path: Path) -> dict[str, np.ndarray]:
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except Exception as exc:  # GGUFReader raises bare ValueErrors and struct errors
        raise QuantizeError(f"corrupt imatrix GGUF ({exc})", path) from None
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        values = np.asarray(t.data, dtype=np.float32).reshape(-1)
        if t.name.endswith(".in_sum2"):
            sums[t.name.removesuffix(".in_sum2")] = values
        elif t.name.endswith(".counts"):
            counts[t.name.removesuffix(".counts")] = values
    out: dict[str, np.ndarray] = {}
    for name, s in sums.items():
        c = counts.get(name)
        if c is None or c.size == 0 or s.size % c.size:
            raise QuantizeError(f"imatrix entry {name!r} has mismatched sums and counts", path)
        per = s.reshape(c.size, -1)
        safe = np.where(c > 0, c, 1)[:, None]
        # a never-seen expert gets neutral importance 1, as llama-quantize does
        out[name] = np.where(c[:, None] > 0, per / safe, 1.0).astype(np.float32).reshape(-1)
    return out


def _load_legacy(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    try:
        (n,) = struct.unpack_from("<i", raw, 0)
        pos, out = 4, {}
        for _ in range(n):
            (name_len,) = struct.unpack_from("<i", raw, pos)
            name = raw[pos + 4 : pos + 4 + name_len].decode("utf-8")
            pos += 4 + name_len
            ncall, nval = struct.unpack_from("<ii", raw, pos)
            pos += 8
            values = np.frombuffer(raw, dtype="<f4", count=nval, offset=pos).astype(np.float32)
            pos += 4 * nval
            out[name] = values / ncall if ncall > 0 else values
    except (struct.error, ValueError, UnicodeDecodeError):
        raise QuantizeError("not an imatrix file (neither GGUF nor legacy .dat)", path) from None
    return out
