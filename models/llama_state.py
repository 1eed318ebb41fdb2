"""One home for saved llama.cpp state: in memory, in a file with its metadata, and the disk budget.

FrogNano's recurrent layers cannot be rewound, so the only way back to an earlier point of the token
stream, into another process or into a larger context, is a copy of the whole context state taken
there. Everything that keeps such a copy goes through here:

- `capture` / `restore`: the state in memory (in-memory snapshots; growing the context).
- `save_file` / `load_file`: llama.cpp's state file (`NAME.state`: KV cache, recurrent state, the
  tokens), written atomically, with an optional pydantic description beside it (`NAME.json`);
  a file that does not load exactly leaves a cleared context.
- `prune`: the least recently used state files of a folder go until the rest fit a count and a byte
  budget; a load counts as a use.

The users decide what a state means: models.state_cache (snapshots, the system prompt's disk cache),
models.saved_points (a conversation's saved point), models.llama_runtime (a context that grows). Plain Python; no textual.
"""

from __future__ import annotations

import ctypes
import errno
import json
import mmap
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

STATE_SUFFIX = ".state"
META_SUFFIX = ".json"

# A captured state: bytes, or a view of the anonymous mapping capture() wrote it into.
StateData = bytes | memoryview
Meta = TypeVar("Meta", bound=BaseModel)


def state_size(llm: Any) -> int:
    """Bytes a capture of the context would take now (before allocating it)."""
    import llama_cpp

    return int(llama_cpp.llama_state_get_size(llm.ctx))


def capture(llm: Any) -> StateData:
    """The whole context state (KV cache, recurrent state, logits), tens of MB on a long context.

    It goes into a fresh anonymous mapping and stays there: Python never zero-fills or copies it.
    Allocating and copying a 69 MB state as Python objects held the GIL for 270-300 ms each here
    (first-touch page faults), freezing the TUI thread; llama.cpp fills the mapping with the GIL
    released.
    """
    import llama_cpp

    size = llama_cpp.llama_state_get_size(llm.ctx)
    mapping = mmap.mmap(-1, max(1, size))
    written = llama_cpp.llama_state_get_data(llm.ctx, (ctypes.c_uint8 * size).from_buffer(mapping), size)
    if written > size:
        raise RuntimeError("llama.cpp wrote more state than it announced")
    return memoryview(mapping)[:written]


def restore(llm: Any, data: StateData, tokens: list[int]) -> bool:
    """Put a captured state back; `tokens` are the tokens it holds. False if llama.cpp refused it."""
    if not put(llm, data):
        return False
    set_tokens(llm, tokens)
    return True


def put(owner: Any, data: StateData) -> bool:
    """Load a captured state into `owner.ctx` (any llama.cpp context: the model's, the MTP head's)."""
    import llama_cpp

    array = ctypes.c_uint8 * len(data)
    buffer = array.from_buffer(data) if isinstance(data, memoryview) and not data.readonly else array.from_buffer_copy(data)
    return bool(llama_cpp.llama_state_set_data(owner.ctx, buffer, len(data)) == len(data))


def set_tokens(llm: Any, tokens: list[int]) -> None:
    """The runtime's record of the stream, after its state was replaced by one holding `tokens`."""
    llm.input_ids[: len(tokens)] = tokens
    llm.n_tokens = len(tokens)
    mtp = getattr(llm, "mtp", None)
    if mtp is not None:
        mtp.clear()  # the MTP head's cache belonged to the replaced state: it starts again from here


def clear(llm: Any) -> None:
    """An empty context (after a load llama.cpp refused half-way)."""
    import llama_cpp

    llm.reset()
    memory = llama_cpp.llama_get_memory(llm.ctx)
    if memory is not None:
        llama_cpp.llama_memory_clear(memory, True)


# -- files ----------------------------------------------------------------------------------------


def meta_path(path: Path) -> Path:
    return path.with_suffix(META_SUFFIX)


def write_meta(path: Path, meta: BaseModel) -> None:
    """The description beside the state file at `path`, atomically; OSError when it cannot be written."""
    target = meta_path(path)
    temp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    temp.write_text(meta.model_dump_json())
    os.replace(temp, target)


META_LIMIT = 64 << 20  # a description holds a fingerprint per message: far below this


def read_saved_file(path: Path, limit: int) -> bytes:
    """A file ribbit saved itself, read only as the plain file it wrote: a link (to /dev/zero: memory
    filled), a FIFO (an open that never returns) or a file past `limit` is an OSError. (models cannot
    use agent/fs.py, the home of these opens for the agent's own files.)"""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a plain file")
        if info.st_size > limit:
            raise OSError(errno.EFBIG, "larger than ribbit writes")
        data = os.read(fd, limit + 1)
        if len(data) > limit:
            raise OSError(errno.EFBIG, "larger than ribbit writes")
        return data
    finally:
        os.close(fd)


def read_meta(path: Path, model: type[Meta]) -> Meta | str:
    """The description beside the state file at `path`, or why it cannot be used (one line)."""
    try:
        raw = read_saved_file(meta_path(path), META_LIMIT)
    except FileNotFoundError:
        return "its saved state is gone (evicted to keep the state folder within its budget)"
    except OSError as exc:
        return f"its saved state cannot be read ({exc.strerror or exc})"
    try:
        return model.model_validate(json.loads(raw))
    except (ValueError, ValidationError):
        return "its saved state's description is corrupt"


def save_file(llm: Any, path: Path, tokens: list[int], meta: BaseModel | None = None) -> bool:
    """llama.cpp's state file for the context (holding exactly `tokens`) at `path`, and `meta` beside it,
    each written atomically. False on any failure (then neither file is left)."""
    import llama_cpp

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    array = (llama_cpp.llama_token * max(1, len(tokens)))(*tokens)
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        if not llama_cpp.llama_state_save_file(llm.ctx, str(temp).encode(), array, len(tokens)):
            temp.unlink(missing_ok=True)
            return False
        os.replace(temp, path)
    except OSError:
        temp.unlink(missing_ok=True)
        return False
    if meta is not None:
        try:
            write_meta(path, meta)
        except OSError:
            path.unlink(missing_ok=True)
            return False
    return True


def load_file(llm: Any, path: Path, n_tokens: int, expected: list[int] | None = None) -> list[int] | None:
    """Load the state file at `path` into the context: its tokens, once it held exactly `n_tokens` (and
    they are `expected`, when given). None (and a cleared context) when it is missing, llama.cpp refuses
    it or it holds other tokens. A load counts as a use for `prune`."""
    import llama_cpp

    try:  # llama.cpp opens it by name: a link or a FIFO put there is not handed over
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
    except OSError:
        return None
    capacity = n_tokens + 1
    array = (llama_cpp.llama_token * capacity)()
    count = ctypes.c_size_t(0)
    ok = llama_cpp.llama_state_load_file(llm.ctx, str(path).encode(), array, capacity, ctypes.byref(count))
    tokens = list(array[: count.value]) if ok else None
    if tokens is None or len(tokens) != n_tokens or (expected is not None and tokens != expected):
        clear(llm)
        return None
    try:
        os.utime(path)  # pruning keeps the most recently used
    except OSError:
        pass
    return tokens


def state_files(folders: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for folder in folders:
        try:
            found += [p for p in folder.rglob("*" + STATE_SUFFIX) if p.is_file()]
        except OSError:
            continue
    return found


def prune(root: Path, *, budget: int | None = None, max_files: int | None = None, keep: Iterable[Path] = ()) -> list[Path]:
    """Delete the least recently used state files under `root` (and their descriptions) until at most
    `max_files` remain within `budget` bytes; never those in `keep`. Returns what was deleted."""
    kept = {p.resolve() for p in keep}
    sized: list[tuple[float, int, Path]] = []
    for path in state_files([root]):
        try:
            st = path.stat()
        except OSError:
            continue
        sized.append((st.st_mtime, st.st_size, path))
    total, count = sum(size for _, size, _ in sized), len(sized)
    deleted: list[Path] = []
    for _, size, path in sorted(sized):
        if (budget is None or total <= budget) and (max_files is None or count <= max_files):
            break
        if path.resolve() in kept:
            continue
        path.unlink(missing_ok=True)
        meta_path(path).unlink(missing_ok=True)
        total -= size
        count -= 1
        deleted.append(path)
    return deleted
