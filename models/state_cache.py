"""Saved llama.cpp states: restore a conversation point instead of re-evaluating it.

FrogNano's recurrent layers cannot be rewound, so the only way back to an earlier point of the token
stream is a snapshot taken there. Two stores:

- `SnapshotStore` keeps a few snapshots in memory (the system prompt, the start of each task), within a
  byte budget; `/clear`, a new task or an undo that rewinds the conversation restores one.
- `DiskStateCache` persists the system-prompt snapshot under `$XDG_CACHE_HOME/ribbit/states`, keyed by the
  model file and the exact tokens, so a second launch starts answering without re-reading the prompt.

The state itself is captured, restored, saved and pruned by models.llama_state; no textual, no app.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models import llama_state
from models.base import cache_folder
from models.llama_state import STATE_SUFFIX, StateData

DEFAULT_MEMORY_BUDGET = 1 << 30
DISK_KEEP = 8  # state files kept per cache folder (newest by use)


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
        if not llama_state.save_file(llm, self.path(tokens), tokens):
            return False
        llama_state.prune(self.folder, max_files=self.keep)
        return True

    def load(self, llm: Any, tokens: list[int]) -> bool:
        """Restore the state saved for exactly `tokens`; False (and a clean context) when there is none."""
        found = llama_state.load_file(llm, self.path(tokens), len(tokens), expected=tokens)
        if found is None:
            return False
        llama_state.set_tokens(llm, tokens)
        return True
