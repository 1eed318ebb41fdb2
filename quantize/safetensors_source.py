"""Read-only, memory-mapped access to a (sharded) safetensors checkpoint.

The header is parsed here rather than through ``safetensors.safe_open`` because the numpy
backend cannot return BF16 and the converter must not need torch at run time. Every tensor is a
view into a read-only mmap; after a tensor has been written, ``release`` drops its pages from
this process (they stay in the page cache), which keeps resident memory flat over a 9 GB read.
"""

from __future__ import annotations

import json
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantize.errors import QuantizeError

# safetensors dtype -> numpy dtype holding its raw bits (BF16 stays uint16 bit patterns)
_RAW_DTYPES: dict[str, np.dtype] = {
    "BF16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
}
_MAX_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    file: Path
    start: int  # absolute byte offset in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


class SafetensorsFile:
    """One shard: its header entries and a lazily created read-only mapping."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries = self._read_header()
        self._map: mmap.mmap | None = None

    def _read_header(self) -> dict[str, TensorEntry]:
        path = self.path
        try:
            size = path.stat().st_size
            with path.open("rb") as fh:
                head = fh.read(8)
                if len(head) < 8:
                    raise QuantizeError("truncated safetensors file (no header)", path)
                (n,) = struct.unpack("<Q", head)
                if n <= 0 or n > _MAX_HEADER or 8 + n > size:
                    raise QuantizeError("corrupt or truncated safetensors header", path)
                header = json.loads(fh.read(n).decode("utf-8"))
        except QuantizeError:
            raise
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise QuantizeError("corrupt safetensors header (not JSON)", path) from None
        except OSError as exc:
            raise QuantizeError(f"cannot read ({exc.strerror})", path) from None
        if not isinstance(header, dict):
            raise QuantizeError("corrupt safetensors header", path)
        base = 8 + n
        entries: dict[str, TensorEntry] = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            entries[name] = self._entry(name, info, base, size)
        return entries

    def _entry(self, name: str, info: object, base: int, size: int) -> TensorEntry:
        path = self.path
        try:
            assert isinstance(info, dict)
            dtype = str(info["dtype"])
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (AssertionError, KeyError, TypeError, ValueError):
            raise QuantizeError(f"corrupt safetensors header entry for {name!r}", path) from None
        if dtype not in _RAW_DTYPES:
            raise QuantizeError(f"tensor {name!r} has dtype {dtype}; only BF16, F16, F32 are supported", path)
        expected = int(np.prod(shape, dtype=np.int64)) * _RAW_DTYPES[dtype].itemsize
        if end - begin != expected or begin < 0:
            raise QuantizeError(f"corrupt safetensors header: {name!r} byte range does not match its shape", path)
        if base + end > size:
            raise QuantizeError(
                f"truncated safetensors file: {name!r} ends at byte {base + end}, file has {size}", path
            )
        return TensorEntry(name, dtype, shape, path, base + begin, base + end)

    def array(self, entry: TensorEntry) -> np.ndarray:
        """The tensor's raw values (BF16 as uint16 bits), a view into the mapping."""
        if self._map is None:
            with self.path.open("rb") as fh:
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        raw = np.frombuffer(self._map, dtype=_RAW_DTYPES[entry.dtype], count=entry.nbytes // _RAW_DTYPES[entry.dtype].itemsize, offset=entry.start)
        return raw.reshape(entry.shape)

    def release(self, entry: TensorEntry, upto: int | None = None) -> None:
        """Drop this tensor's pages (up to byte ``upto`` of it) from our address space; the page
        cache keeps them, so this costs nothing but keeps resident memory flat."""
        if self._map is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        start = entry.start - entry.start % page
        end = entry.end if upto is None else min(entry.end, entry.start + upto)
        length = end - start
        try:
            self._map.madvise(mmap.MADV_DONTNEED, start, length)
        except (OSError, ValueError):
            pass  # advisory only

    def close(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # a view is still alive; the mapping goes with the process
            self._map = None


class Checkpoint:
    """All shards of a checkpoint directory, addressed by tensor name."""

    def __init__(self, src: Path) -> None:
        self.src = src
        self.files = [SafetensorsFile(p) for p in _shard_paths(src)]
        self.entries: dict[str, TensorEntry] = {}
        self._owner: dict[str, SafetensorsFile] = {}
        for f in self.files:
            for name, entry in f.entries.items():
                if name in self.entries:
                    raise QuantizeError(f"tensor {name!r} also appears in {self.entries[name].file.name}", f.path)
                self.entries[name] = entry
                self._owner[name] = f

    def array(self, name: str) -> np.ndarray:
        return self._owner[name].array(self.entries[name])

    def release(self, name: str, upto: int | None = None) -> None:
        self._owner[name].release(self.entries[name], upto)

    def close(self) -> None:
        for f in self.files:
            f.close()


def _shard_paths(src: Path) -> list[Path]:
    index = src / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise QuantizeError("corrupt safetensors index (expected a 'weight_map' object)", index) from None
        paths = [src / n for n in names]
        for p in paths:
            if not p.is_file():
                raise QuantizeError(f"missing (listed in {index.name})", p)
        return paths
    single = src / "model.safetensors"
    if single.is_file():
        return [single]
    shards = sorted(src.glob("*.safetensors"))
    if not shards:
        raise QuantizeError("no *.safetensors weights in the checkpoint directory", src)
    return shards
