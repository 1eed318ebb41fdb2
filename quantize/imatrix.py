"""Importance matrices: llama.cpp's GGUF imatrix format (and its older .dat), read and written.

For every weight W that a matrix multiply applies to an activation x, the matrix holds the sum over
the tokens seen of x_j² for each column j of W, and the count of those tokens; per expert for MoE
weights. llama-quantize divides sum by count and weighs each column's rounding error by it, so the
columns that carry large activations are kept most exact.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from quantize.errors import QuantizeError

# the keys llama-imatrix writes and llama-quantize requires (common/imatrix-loader.h)
KEY_DATASETS = "imatrix.datasets"
KEY_CHUNK_COUNT = "imatrix.chunk_count"
KEY_CHUNK_SIZE = "imatrix.chunk_size"


@dataclass
class Activations:
    """One weight's statistics: `sums` is (n_mat, n_cols) float64 — n_mat is 1 for a dense weight,
    the expert count for a MoE one — and `counts` (n_mat,) the tokens each matrix saw."""

    sums: np.ndarray
    counts: np.ndarray

    @property
    def n_cols(self) -> int:
        return int(self.sums.shape[1])


@dataclass
class ImportanceMatrix:
    entries: dict[str, Activations] = field(default_factory=dict)
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0
    chunk_size: int = 0

    def add_dense(self, name: str, x: np.ndarray, w_ne2: int = 1, w_ne3: int = 1) -> None:
        """Activations `x` of shape (ne3, ne2, n_rows, n_cols) that went into weight `name`. A weight of
        w_ne3 x w_ne2 stacked matrices took x[i3, i2] into matrix (i3 % w_ne3) * w_ne2 + i2 % w_ne2, as
        ggml broadcasts; a plain 2-D weight is one matrix."""
        n_mat = w_ne2 * w_ne3
        entry = self._entry(name, n_mat, x.shape[-1])
        for i3 in range(x.shape[0]):
            for i2 in range(x.shape[1]):
                block = x[i3, i2]
                entry.sums[(i3 % w_ne3) * w_ne2 + i2 % w_ne2] += np.einsum("ij,ij->j", block, block, dtype=np.float64)
        # one count per dense weight: every matrix saw the same tokens (imatrix.cpp keeps it so too)
        entry.counts += x.shape[0] * x.shape[1] * x.shape[2] // n_mat

    def add_routed(self, name: str, x: np.ndarray, experts: np.ndarray, n_experts: int) -> None:
        """A MoE weight: `experts` (n_tokens, n_used) holds the expert each token was routed to in each
        slot, `x` (n_tokens, n_used or 1, n_cols) the activation that went into that expert."""
        entry = self._entry(name, n_experts, x.shape[-1])
        n_used = experts.shape[1]
        for slot in range(n_used):
            rows = x[:, slot % x.shape[1], :]
            ids = experts[:, slot]
            if ids.size and (ids.min() < 0 or ids.max() >= n_experts):
                raise ValueError(f"{name}: expert id out of range")
            np.add.at(entry.sums, ids, rows.astype(np.float64) ** 2)
            np.add.at(entry.counts, ids, 1)

    def _entry(self, name: str, n_mat: int, n_cols: int) -> Activations:
        entry = self.entries.get(name)
        if entry is None:
            entry = self.entries[name] = Activations(np.zeros((n_mat, n_cols)), np.zeros(n_mat, dtype=np.int64))
        elif entry.sums.shape != (n_mat, n_cols):
            raise ValueError(f"{name}: activations of shape {(n_mat, n_cols)} after {entry.sums.shape}")
        return entry

    def save(self, path: Path) -> None:
        """Write llama-imatrix's GGUF format: `<weight>.in_sum2` (n_cols x n_mat) and `<weight>.counts`
        (1 x n_mat) as F32, names in sorted order, and the three metadata keys llama-quantize checks."""
        from gguf import GGUFType, GGUFWriter

        for name, entry in self.entries.items():
            if not np.all(np.isfinite(entry.sums)):
                raise QuantizeError(f"non-finite activations for {name}", path)
        writer = GGUFWriter(path, arch="")
        writer.kv_data[0].pop("general.architecture", None)  # an imatrix has none; llama-imatrix writes none
        writer.add_type(GGUFType.IMATRIX)
        writer.add_array(KEY_DATASETS, list(self.datasets))
        writer.add_uint32(KEY_CHUNK_COUNT, self.chunk_count)
        writer.add_uint32(KEY_CHUNK_SIZE, self.chunk_size)
        for name in sorted(self.entries):
            entry = self.entries[name]
            writer.add_tensor(f"{name}.in_sum2", entry.sums.astype(np.float32))
            writer.add_tensor(f"{name}.counts", entry.counts.astype(np.float32).reshape(-1, 1))
        try:
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()


def read_imatrix(path: Path) -> ImportanceMatrix:
    """A GGUF imatrix as written (raw sums and counts); QuantizeError for anything else."""
    from gguf import GGUFReader

    if not path.is_file():
        raise QuantizeError("missing imatrix file", path)
    try:
        reader = GGUFReader(path)
    except Exception as exc:  # GGUFReader raises bare ValueErrors and struct errors
        raise QuantizeError(f"corrupt imatrix GGUF ({exc})", path) from None
    out = ImportanceMatrix()
    datasets = reader.get_field(KEY_DATASETS)
    if datasets is not None:
        out.datasets = [bytes(datasets.parts[i]).decode("utf-8", "replace") for i in datasets.data]
    for key in (KEY_CHUNK_COUNT, KEY_CHUNK_SIZE):
        found = reader.get_field(key)
        if found is not None:
            setattr(out, key.split(".")[1], int(found.parts[found.data[0]][0]))
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        values = np.asarray(t.data, dtype=np.float32)
        if t.name.endswith(".in_sum2"):
            sums[t.name.removesuffix(".in_sum2")] = values.reshape(-1, int(t.shape[0]))  # (n_mat, n_cols)
        elif t.name.endswith(".counts"):
            counts[t.name.removesuffix(".counts")] = values.reshape(-1)
    for name, s in sums.items():
        c = counts.get(name)
        if c is None or c.size == 0 or s.size % c.size:
            raise QuantizeError(f"imatrix entry {name!r} has mismatched sums and counts", path)
        out.entries[name] = Activations(s.reshape(c.size, -1).astype(np.float64), np.rint(c).astype(np.int64))
    return out


def load_imatrix(path: Path) -> dict[str, np.ndarray]:
    """The per-tensor importance llama_model_quantize takes: sum / count, as llama-quantize computes it."""
    if not path.is_file():
        raise QuantizeError("missing imatrix file", path)
    with path.open("rb") as fh:
        magic = fh.read(4)
    data = normalised(read_imatrix(path)) if magic == b"GGUF" else _load_legacy(path)
    if not data:
        raise QuantizeError("imatrix holds no entries", path)
    return data


def normalised(matrix: ImportanceMatrix) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name, entry in matrix.entries.items():
        c = entry.counts.astype(np.float64)[:, None]
        # a never-seen expert gets neutral importance 1, as llama-quantize does
        per = np.where(c > 0, entry.sums / np.where(c > 0, c, 1), 1.0)
        out[name] = per.astype(np.float32).reshape(-1)
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
