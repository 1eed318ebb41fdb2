"""Saved conversation points: a backend's state on disk together with what it covers, so a session
resumes (or rewinds) without re-reading its conversation.

A point is two files: `NAME.state` (llama.cpp's state file: KV cache, recurrent state, the tokens) and
`NAME.json` (which model wrote it, how many tokens it holds, and a hash of each message it covers).
The hashes tie the state to one conversation: a point is loaded only for the messages it was saved with,
so a tampered or mismatched file is refused with a reason, never half-used. The agent decides where
points live (agent.session.store keeps them in ribbit's state folder, hidden from the Bash sandbox) and
how much disk they may take (`prune_points`).

Plain Python; no textual, no agent.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from models.chat import ChatMessage

POINT_SUFFIX = ".state"
META_SUFFIX = ".json"
# A consumed entry that stands for an assistant turn the backend generated itself (its tokens are the
# sampled ones, not a render of the message).
GENERATED = "<generated>"


class PointMeta(BaseModel):
    version: Literal[1] = 1
    identity: str
    n_tokens: int
    consumed: list[str]  # message hashes (or GENERATED), in order
    pending: list[int] = []  # tokens rendered but not yet evaluated (a turn's close)


@runtime_checkable
class SavesPoints(Protocol):
    """A backend whose conversation state can be saved to disk and loaded in another process."""

    def state_identity(self) -> str:
        """What a saved state depends on: the model file and the settings that change the state."""
        ...

    def save_point(self, path: Path) -> bool:
        """Save the state after the last turn at `path` (+ its .json); False when it could not."""
        ...

    def load_point(self, path: Path, messages: list[ChatMessage]) -> str | None:
        """Load the point saved at `path` for a conversation starting with `messages`: None when
        loaded, else why not (one line); a failed load leaves the backend as a fresh one."""
        ...


def message_hash(fingerprint: str) -> str:
    return hashlib.sha256(fingerprint.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def meta_path(path: Path) -> Path:
    return path.with_suffix(META_SUFFIX)


def write_meta(path: Path, meta: PointMeta) -> None:
    temp = meta_path(path).with_name(meta_path(path).name + f".{os.getpid()}.tmp")
    temp.write_text(meta.model_dump_json())
    os.replace(temp, meta_path(path))


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


def read_meta(path: Path) -> PointMeta | str:
    """The point's metadata, or why it cannot be used (one line)."""
    try:
        raw = read_saved_file(meta_path(path), META_LIMIT)
    except FileNotFoundError:
        return "its saved state is gone (evicted to keep the state folder within its budget)"
    except OSError as exc:
        return f"its saved state cannot be read ({exc.strerror or exc})"
    try:
        return PointMeta.model_validate(json.loads(raw))
    except (ValueError, ValidationError):
        return "its saved state's description is corrupt"


def consumed_matches(consumed: list[str], fingerprints: list[str], roles: list[str]) -> bool:
    if len(consumed) > len(fingerprints):
        return False
    for seen, fingerprint, role in zip(consumed, fingerprints, roles):
        if seen == GENERATED:
            if role != "assistant":
                return False
        elif seen != message_hash(fingerprint):
            return False
    return True


def save_state_file(llm: Any, path: Path, tokens: list[int]) -> bool:
    """llama.cpp's state file for the context (holding exactly `tokens`), written atomically."""
    import llama_cpp

    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    array = (llama_cpp.llama_token * max(1, len(tokens)))(*tokens)
    try:
        if not llama_cpp.llama_state_save_file(llm.ctx, str(temp).encode(), array, len(tokens)):
            temp.unlink(missing_ok=True)
            return False
        os.replace(temp, path)
    except OSError:
        temp.unlink(missing_ok=True)
        return False
    return True


def load_state_file(llm: Any, path: Path, n_tokens: int) -> list[int] | None:
    """The tokens of the state file at `path` once loaded into the context; None (and a cleared
    context) when llama.cpp refuses it or it does not hold `n_tokens` tokens."""
    import llama_cpp

    from models.state_cache import _clear_memory

    try:  # llama.cpp opens it by name: a link or a FIFO put there since is not handed over
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
    except OSError:
        return None
    capacity = n_tokens + 1
    array = (llama_cpp.llama_token * capacity)()
    count = ctypes.c_size_t(0)
    ok = llama_cpp.llama_state_load_file(llm.ctx, str(path).encode(), array, capacity, ctypes.byref(count))
    if not ok or count.value != n_tokens:
        llm.reset()
        _clear_memory(llm)
        return None
    return list(array[: count.value])


def point_files(folders: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for folder in folders:
        try:
            found += [p for p in folder.rglob("*" + POINT_SUFFIX) if p.is_file()]
        except OSError:
            continue
    return found


def prune_points(root: Path, budget: int, keep: Iterable[Path] = ()) -> list[Path]:
    """Delete the least recently used points under `root` until they fit `budget` bytes; never those in
    `keep`. Returns what was deleted."""
    kept = {p.resolve() for p in keep}
    sized: list[tuple[float, int, Path]] = []
    for path in point_files([root]):
        try:
            st = path.stat()
        except OSError:
            continue
        sized.append((st.st_mtime, st.st_size, path))
    total = sum(size for _, size, _ in sized)
    deleted: list[Path] = []
    for _, size, path in sorted(sized):
        if total <= budget:
            break
        if path.resolve() in kept:
            continue
        path.unlink(missing_ok=True)
        meta_path(path).unlink(missing_ok=True)
        total -= size
        deleted.append(path)
    return deleted
