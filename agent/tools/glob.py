from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pathspec
from pydantic import Field

from agent.tools.base import Tool, ToolArgs, ToolContext, ToolError
from agent.tools.glob_pattern import GlobPatternError, compile_glob, glob_matches
from agent.tools.paths import display_path, resolve_in_root

MAX_RESULTS = 100


class GlobArgs(ToolArgs):
    pattern: str = Field(description='Glob pattern, e.g. "**/*.py" or "src/*.{ts,tsx}"')
    path: str | None = Field(None, description="Folder to search in (default: the repository root)")


def repo_files(root: Path) -> list[str]:
    """Non-ignored files, relative to root: git's own view when it is a repo, else a .gitignore walk."""
    if (root / ".git").exists():
        try:
            out = subprocess.run(
                ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                capture_output=True, check=True, timeout=60,
            ).stdout
            return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p and (root / p).is_file()]
        except (OSError, subprocess.SubprocessError):
            pass
    return walk_with_gitignore(root)


def walk_with_gitignore(root: Path) -> list[str]:
    found: list[str] = []
    specs: list[tuple[str, pathspec.PathSpec]] = []
    for folder, dirs, files in os.walk(root):
        rel_folder = os.path.relpath(folder, root).replace(os.sep, "/")
        rel_folder = "" if rel_folder == "." else rel_folder + "/"
        ignore_file = Path(folder) / ".gitignore"
        if ignore_file.is_file():
            try:
                lines = ignore_file.read_text(errors="replace").splitlines()
                specs.append((rel_folder, pathspec.PathSpec.from_lines("gitignore", lines)))
            except OSError:
                pass

        def ignored(rel: str) -> bool:
            return any(rel.startswith(base) and spec.match_file(rel[len(base):]) for base, spec in specs)

        dirs[:] = [d for d in dirs if d != ".git" and not ignored(f"{rel_folder}{d}/")]
        found.extend(f"{rel_folder}{name}" for name in files if not ignored(f"{rel_folder}{name}"))
    return found


class GlobTool(Tool[GlobArgs]):
    name = "Glob"
    description = (
        "Find files by name pattern (** spans folders). Respects .gitignore. "
        "Returns paths relative to the repository root, newest first."
    )
    args_model = GlobArgs

    def run(self, args: GlobArgs, ctx: ToolContext) -> str:
        if not args.pattern.strip():
            raise ToolError("pattern is empty")
        base = resolve_in_root(ctx.root, args.path) if args.path else ctx.root
        if not base.is_dir():
            raise ToolError(f"{display_path(ctx.root, base)} is not a folder")
        prefix = "" if base == ctx.root else display_path(ctx.root, base) + "/"
        pattern = args.pattern.lstrip("/")
        if pattern.startswith(prefix) and prefix:
            pattern = pattern[len(prefix):]
        try:
            regex = compile_glob(pattern)
        except GlobPatternError as exc:
            raise ToolError(f"bad pattern: {exc}") from None
        matches = [
            rel for rel in repo_files(ctx.root) if rel.startswith(prefix) and glob_matches(regex, rel[len(prefix):])
        ]
        if not matches:
            return "No files found"

        def mtime(rel: str) -> float:
            try:
                return (ctx.root / rel).stat().st_mtime
            except OSError:
                return 0.0

        matches.sort(key=lambda rel: (-mtime(rel), rel))
        shown = matches[:MAX_RESULTS]
        text = "\n".join(shown)
        if len(matches) > MAX_RESULTS:
            text += f"\n(Showing {MAX_RESULTS} of {len(matches)} matches; narrow the pattern or path.)"
        return text
