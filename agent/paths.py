"""Every folder ribbit keeps things in outside the repository, and the names it gives them.

State (`$XDG_STATE_HOME/ribbit`: journals of folders that are not repositories, saved sessions, per-project
settings, cut command outputs, crash logs) and configuration (`$XDG_CONFIG_HOME/ribbit`: sandbox.toml,
AGENTS.md). Caches (`$XDG_CACHE_HOME/ribbit`) are the models' (models/base.py). A relative XDG_* value is
ignored, as the XDG spec says (it would put ribbit's files in whatever folder ribbit runs in).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from pathlib import Path


def _xdg(name: str, default: str, environ: Mapping[str, str]) -> Path:
    value = environ.get(name, "")
    return Path(value) if value and os.path.isabs(value) else home_dir(environ) / default


def home_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get("HOME") or Path.home())


def state_home(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_STATE_HOME/ribbit` (default ~/.local/state/ribbit)."""
    return _xdg("XDG_STATE_HOME", ".local/state", os.environ if environ is None else environ) / "ribbit"


def config_home(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CONFIG_HOME/ribbit` (default ~/.config/ribbit)."""
    return _xdg("XDG_CONFIG_HOME", ".config", os.environ if environ is None else environ) / "ribbit"


def project_key(root: Path) -> str:
    """`NAME-HASH` for a folder: what ribbit's per-project state outside the repository is named by."""
    resolved = root.resolve()
    return f"{resolved.name}-{hashlib.sha256(str(resolved).encode()).hexdigest()[:16]}"


def project_state(root: Path) -> Path:
    """Per-project settings folder (kept outside the repository, so nothing leaks into commits)."""
    return state_home() / "projects" / project_key(root)


def private_git_dir(root: Path) -> Path:
    """The undo journal of a folder that is not a git repository."""
    return state_home() / "journals" / f"{project_key(root)}.git"


def new_session_id() -> str:
    """Sorts in the order sessions began, also within one second (sessions() breaks ties of its
    one-second commit times by id, and undo takes the last): milliseconds, then 3 random hex digits."""
    now = time.time()
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f"-{int(now % 1 * 1000):03d}{os.urandom(2).hex()[:3]}"
