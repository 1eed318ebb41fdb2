from __future__ import annotations

import os
from pathlib import Path

import pathspec
from pydantic import Field

from agent.checkout.gitcmd import GitError, session_repo
from agent.fs import is_git_dir_name
from agent.core.tools.base import Tool, ToolArgs, ToolContext, ToolError
from agent.core.tools.files import open_regular
from agent.core.tools.glob_pattern import GlobPatternError, compile_glob, glob_matches
from agent.core.tools.paths import display_path, resolve_in_root

MAX_RESULTS = 100


class GlobArgs(ToolArgs):
    pattern: str = Field(description='Glob pattern, e.g. "**/*.py" or "src/*.{ts,tsx}"')
    path: str | None = Field(None, description="Folder to search in (default: the repository root)")


def repo_files(root: Path) -> list[str]:
    """Non-ignored files, relative to root.

    Git's own view, from the repository (or private journal) the session fixed when it started
    (agent/checkout/gitcmd.py: never a `.git` found now, nothing a config names runs); a folder holding
    its own `.git` is walked here, since git does not look inside. Without a session: a
    .gitignore walk.
    """
    repo = session_repo(root)
    if repo is not None:
        try:
            out = repo.out("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=root)
        except GitError:
            return walk_with_gitignore(root)
        files: list[str] = []
        for rel in os.fsdecode(out).split("\0"):
            if not rel or any(is_git_dir_name(part) for part in rel.split("/")):
                continue
            if rel.endswith("/"):
                files.extend(rel + sub for sub in walk_with_gitignore(root / rel))
            elif (root / rel).is_file():
                files.append(rel)
        return files
    return walk_with_gitignore(root)


def _ignore_spec(folder: str) -> pathspec.PathSpec | None:
    """The folder's .gitignore, if it is a regular file (opened without blocking: never a FIFO's wait)."""
    try:
        fd, _ = open_regular(Path(folder) / ".gitignore", ".gitignore")
    except ToolError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            lines = handle.read(1 << 20).decode("utf-8", "replace").splitlines()  # at most 1 MiB of it
    except OSError:
        return None
    return pathspec.PathSpec.from_lines("gitignore", lines)


def walk_with_gitignore(root: Path) -> list[str]:
    """Files under `root` that no .gitignore on the way excludes; links are not followed.

    An explicit stack, not os.walk (recursive in Python 3.11): a tree thousands of folders deep is
    walked like any other.
    """
    found: list[str] = []
    stack: list[tuple[str, list[tuple[str, pathspec.PathSpec]]]] = [("", [])]
    while stack:
        rel_folder, inherited = stack.pop()
        folder = os.path.join(root, rel_folder) if rel_folder else str(root)
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        specs = inherited
        if any(e.name == ".gitignore" for e in entries):
            spec = _ignore_spec(folder)
            if spec is not None:
                specs = [*inherited, (rel_folder, spec)]

        def ignored(rel: str) -> bool:
            return any(rel.startswith(base) and spec.match_file(rel[len(base):]) for base, spec in specs)

        for entry in sorted(entries, key=lambda e: e.name, reverse=True):
            if is_git_dir_name(entry.name):
                continue
            rel = f"{rel_folder}{entry.name}"
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if not ignored(rel + "/"):
                    stack.append((rel + "/", specs))
            elif not ignored(rel):
                found.append(rel)
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
