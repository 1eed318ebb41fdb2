"""Read a GGUF file's metadata keys without touching its tensors (gguf.GGUFReader maps them all,
which takes seconds on a large file; this reads only the header)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

from models.base import ModelError

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# Arrays (the vocabulary) can be huge; keep only their length unless asked for.
MAX_ARRAY_KEEP = 64


def _read(handle: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = handle.read(size)
    if len(data) != size:
        raise EOFError
    return struct.unpack(fmt, data)[0]


def _string(handle: BinaryIO) -> str:
    length = _read(handle, "<Q")
    data = handle.read(length)
    if len(data) != length:
        raise EOFError
    return data.decode("utf-8", "replace")


def _value(handle: BinaryIO, kind: int) -> Any:
    if kind in _SCALARS:
        return _read(handle, _SCALARS[kind])
    if kind == _STRING:
        return _string(handle)
    if kind == _ARRAY:
        item_kind, count = _read(handle, "<I"), _read(handle, "<Q")
        if item_kind in _SCALARS and count > MAX_ARRAY_KEEP:
            handle.seek(struct.calcsize(_SCALARS[item_kind]) * count, 1)
            return {"array_length": count}
        items = [_value(handle, item_kind) for _ in range(count)]
        return items if count <= MAX_ARRAY_KEEP else {"array_length": count}
    raise ValueError(f"unknown GGUF value type {kind}")


def read_metadata(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            if handle.read(4) != b"GGUF":
                raise ModelError(f"{path} is not a GGUF file")
            version = _read(handle, "<I")
            if version < 2:
                raise ModelError(f"{path} is GGUF version {version}; only version 2 and later are supported")
            _tensors, count = _read(handle, "<Q"), _read(handle, "<Q")
            meta: dict[str, Any] = {"gguf.version": version, "gguf.tensor_count": _tensors}
            for _ in range(count):
                key = _string(handle)
                meta[key] = _value(handle, _read(handle, "<I"))
            return meta
    except (EOFError, struct.error, ValueError, UnicodeDecodeError):
        raise ModelError(f"{path} is truncated or corrupt (its GGUF header cannot be read)") from None
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None


def trained_context(meta: dict[str, Any]) -> int | None:
    arch = meta.get("general.architecture")
    value = meta.get(f"{arch}.context_length") if arch else None
    return int(value) if isinstance(value, int) else None
