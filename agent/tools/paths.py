"""Root confinement: every path a tool touches must resolve (symlinks included) inside the repo."""

from __future__ import annotations

import os
from pathlib import Path

from agent.tools.base import ToolError


def resolve_in_root(root: Path, file_path: str) -> Path:
    """Absolute, symlink-resolved path of `file_path` inside `root`, or ToolError."""
    if not file_path or not str(file_path).strip():
        raise ToolError("file_path is empty")
    if "\x00" in file_path:
        raise ToolError("file_path contains a NUL byte")
    raw = Path(os.path.expanduser(file_path)) if file_path.startswith("~") else Path(file_path)
    candidate = raw if raw.is_absolute() else root / raw
    resolved = candidate.resolve(strict=False)
    if resolved != root and not resolved.is_relative_to(root):
        raise ToolError(f"{file_path} is outside the repository root {root}")
    rel = resolved.relative_to(root)
    if rel.parts and rel.parts[0] == ".git":
        raise ToolError(f"{file_path} is inside .git/, which the agent may not touch")
    return resolved


def display_path(root: Path, path: Path) -> str:
    """Repo-relative form used in results and diffs."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)
