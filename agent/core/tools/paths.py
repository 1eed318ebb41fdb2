"""Root confinement: every path a tool touches must resolve (symlinks included) inside the repo."""

from __future__ import annotations

import os
from pathlib import Path

from agent.fs import is_git_dir_name
from agent.core.tools.errors import ToolError

PATH_MAX = 4096


def resolve_in_root(root: Path, file_path: str) -> Path:
    """Absolute, symlink-resolved path of `file_path` inside `root`, or ToolError."""
    if not file_path or not str(file_path).strip():
        raise ToolError("file_path is empty")
    if "\x00" in file_path:
        raise ToolError("file_path contains a NUL byte")
    raw = Path(os.path.expanduser(file_path)) if file_path.startswith("~") else Path(file_path)
    candidate = raw if raw.is_absolute() else root / raw
    try:
        resolved = candidate.resolve(strict=False)
    except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, an unencodable name
        why = getattr(exc, "strerror", None) or ("symlink loop" if isinstance(exc, RuntimeError) else "invalid name")
        raise ToolError(f"cannot resolve {file_path!r}: {why}") from None
    if len(str(resolved).encode("utf-8", "surrogatepass")) >= PATH_MAX:
        # Past PATH_MAX the OS cannot resolve the links on the way, so confinement cannot be checked.
        raise ToolError(f"{file_path[:80]}... is too long a path ({len(str(resolved))} characters; the limit is {PATH_MAX})")
    if resolved != root and not resolved.is_relative_to(root):
        raise ToolError(f"{file_path} is outside the repository root {root}")
    rel = resolved.relative_to(root)
    # Any depth, any spelling a file system may fold into `.git` (.GIT, git~1, `.git.`...): a
    # nested .git would make a folder a repository whose config the user's own git obeys.
    if any(is_git_dir_name(part) for part in rel.parts):
        raise ToolError(f"{file_path} is inside .git/, which the agent may not touch")
    return resolved


def display_path(root: Path, path: Path) -> str:
    """Repo-relative form used in results and diffs."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)
