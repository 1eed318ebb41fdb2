"""Saved conversation points: a backend's state on disk together with what it covers, so a session
resumes (or rewinds) without re-reading its conversation.

A point is two files: `NAME.state` (llama.cpp's state file: KV cache, recurrent state, the tokens) and
`NAME.json` (which model wrote it, how many tokens it holds, and a hash of each message it covers).
The hashes tie the state to one conversation: a point is loaded only for the messages it was saved with,
so a tampered or mismatched file is refused with a reason, never half-used. The agent decides where
points live (agent.session.store keeps them in ribbit's state folder, hidden from the Bash sandbox) and
how much disk they may take (`prune_points`). The files themselves are written, loaded and pruned by
models.llama_state.

Plain Python; no textual, no agent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from models import llama_state
from models.chat import ChatMessage
from models.llama_state import META_LIMIT, META_SUFFIX, STATE_SUFFIX, meta_path, read_saved_file, write_meta

__all__ = ["GENERATED", "META_LIMIT", "META_SUFFIX", "POINT_SUFFIX", "PointMeta", "SavesPoints", "consumed_matches", "message_hash",
           "meta_path", "prune_points", "read_meta", "read_saved_file", "write_meta"]

POINT_SUFFIX = STATE_SUFFIX
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


def read_meta(path: Path) -> PointMeta | str:
    """The point's metadata, or why it cannot be used (one line)."""
    return llama_state.read_meta(path, PointMeta)


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


def prune_points(root: Path, budget: int, keep: Iterable[Path] = ()) -> list[Path]:
    """Delete the least recently used points under `root` until they fit `budget` bytes; never those in
    `keep`. Returns what was deleted."""
    return llama_state.prune(root, budget=budget, keep=keep)
