"""Saved llama.cpp states: restore a conversation point instead of re-evaluating it.

FrogNano's recurrent layers cannot be rewound, so the only way back to an earlier point of the token
stream is a snapshot taken there. Two stores:

- `SnapshotStore` keeps a few snapshots in memory (the system prompt, the start of each task), within a
  byte budget; `/clear`, a new task or an undo that rewinds the conversation restores one.
- `DiskStateCache` persists the system-prompt snapshot under `$XDG_CACHE_HOME/ribbit/states`, keyed by the
  model file and the exact tokens, so a second launch starts answering without re-reading the prompt.

Plain Python around llama.cpp's `llama_state_*` calls; no textual, no app.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import mmap
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.base import cache_folder

DEFAULT_MEMORY_BUDGET = 1 << 30
DISK_KEEP = 8  # state files kept per cache folder (newest by use)
# A state file's name ends with this; the token list sits beside it as `<key>.json`.
STATE_SUFFIX = ".state"


def state_size(llm: Any) -> int:
    """Bytes a capture of the context would take now (before allocating it)."""
    import llama_cpp

    return int(llama_cpp.llama_state_get_size(llm.ctx))


# A captured state: bytes, or a view of the anonymous mapping capture_state wrote it into.
StateData = bytes | memoryview


def capture_state(llm: Any) -> StateData:
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


def restore_state(llm: Any, data: StateData, tokens: list[int]) -> bool:
    """Put a captured state back; `tokens` are the tokens it holds. False if llama.cpp refused it."""
    import llama_cpp

    array = ctypes.c_uint8 * len(data)
    buffer = array.from_buffer(data) if isinstance(data, memoryview) and not data.readonly else array.from_buffer_copy(data)
    if llama_cpp.llama_state_set_data(llm.ctx, buffer, len(data)) != len(data):
        return False
    _set_tokens(llm, tokens)
    return True


def _set_tokens(llm: Any, tokens: list[int]) -> None:
    llm.input_ids[: len(tokens)] = tokens
    llm.n_tokens = len(tokens)
    mtp = getattr(llm, "mtp", None)
    if mtp is not None:
        mtp.clear()  # the MTP head's cache belonged to the replaced state: it starts again from here


@dataclass
class Snapshot:
    """A point of the token stream: the evaluated tokens and the backend bookkeeping that goes with them."""

    tokens: list[int]
    data: StateData
    # Fingerprints of the messages these tokens cover (see LlamaCppModel); None for a prompt-prefix snapshot.
    consumed: list[str] | None = None
    pending: list[int] = field(default_factory=list)
    kind: str = "turn"  # "system", "tools" (repo-independent prefix) or "turn"
    created: float = field(default_factory=time.monotonic)

    @property
    def nbytes(self) -> int:
        return len(self.data) + 4 * len(self.tokens)


class SnapshotStore:
    """In-memory snapshots within a byte budget; prompt-prefix snapshots are dropped last."""

    def __init__(self, budget: int = DEFAULT_MEMORY_BUDGET, max_turns: int = 4) -> None:
        self.budget = budget
        self.max_turns = max_turns
        self.items: list[Snapshot] = []

    def add(self, snapshot: Snapshot) -> None:
        if snapshot.nbytes > self.budget:
            return
        self.items = [s for s in self.items if s.tokens != snapshot.tokens or s.consumed != snapshot.consumed]
        self.items.append(snapshot)
        turns = [s for s in self.items if s.kind == "turn"]
        for old in turns[: max(0, len(turns) - self.max_turns)]:
            self.items.remove(old)
        while sum(s.nbytes for s in self.items) > self.budget and len(self.items) > 1:
            victim = next((s for s in self.items if s.kind == "turn"), self.items[0])
            self.items.remove(victim)

    def prefix(self, kind: str, tokens: list[int]) -> Snapshot | None:
        for snap in reversed(self.items):
            if snap.kind == kind and snap.tokens == tokens:
                return snap
        return None

    def turns(self) -> list[Snapshot]:
        """Turn snapshots, the one covering the most messages first."""
        found = [s for s in self.items if s.kind == "turn" and s.consumed is not None]
        return sorted(found, key=lambda s: len(s.consumed or []), reverse=True)

    def clear(self) -> None:
        self.items = []


def cache_dir() -> Path:
    return cache_folder("states")


def model_identity(path: Path, **settings: Any) -> str:
    """What a saved state depends on besides its tokens: the exact model file and the context settings."""
    try:
        stat = path.stat()
        file_id = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    except OSError:
        file_id = str(path)
    try:
        import llama_cpp

        version = llama_cpp.__version__
    except ImportError:  # pragma: no cover - the backend needs it anyway
        version = "?"
    return json.dumps({"file": file_id, "llama_cpp": version, **settings}, sort_keys=True)


class DiskStateCache:
    """State files keyed by (model identity, exact tokens); written atomically, pruned to DISK_KEEP."""

    def __init__(self, identity: str, folder: Path | None = None, keep: int = DISK_KEEP) -> None:
        self.identity = identity
        self.folder = folder or cache_dir()
        self.keep = keep

    def key(self, tokens: list[int]) -> str:
        digest = hashlib.sha256(self.identity.encode())
        digest.update(b"\0")
        digest.update(",".join(map(str, tokens)).encode())
        return digest.hexdigest()[:32]

    def path(self, tokens: list[int]) -> Path:
        return self.folder / (self.key(tokens) + STATE_SUFFIX)

    def has(self, tokens: list[int]) -> bool:
        return self.path(tokens).is_file()

    def save(self, llm: Any, tokens: list[int]) -> bool:
        """Write the context's current state (which must hold exactly `tokens`). False on any failure."""
        import llama_cpp

        target = self.path(tokens)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return False
        temp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        array = (llama_cpp.llama_token * len(tokens))(*tokens)
        try:
            if not llama_cpp.llama_state_save_file(llm.ctx, str(temp).encode(), array, len(tokens)):
                temp.unlink(missing_ok=True)
                return False
            os.replace(temp, target)
        except OSError:
            temp.unlink(missing_ok=True)
            return False
        self._prune()
        return True

    def load(self, llm: Any, tokens: list[int]) -> bool:
        """Restore the state saved for exactly `tokens`; False (and a clean context) when there is none."""
        import llama_cpp

        target = self.path(tokens)
        if not target.is_file():
            return False
        capacity = len(tokens) + 1
        array = (llama_cpp.llama_token * capacity)()
        count = ctypes.c_size_t(0)
        ok = llama_cpp.llama_state_load_file(llm.ctx, str(target).encode(), array, capacity, ctypes.byref(count))
        if not ok or list(array[: count.value]) != tokens:
            llm.reset()
            _clear_memory(llm)
            return False
        _set_tokens(llm, tokens)
        try:
            os.utime(target)  # pruning keeps the most recently used
        except OSError:
            pass
        return True

    def _prune(self) -> None:
        try:
            files = sorted(self.folder.glob("*" + STATE_SUFFIX), key=lambda p: p.stat().st_mtime, reverse=True)
        except OSError:
            return
        for old in files[self.keep :]:
            old.unlink(missing_ok=True)


def _clear_memory(llm: Any) -> None:
    import llama_cpp

    memory = llama_cpp.llama_get_memory(llm.ctx)
    if memory is not None:
        llama_cpp.llama_memory_clear(memory, True)
