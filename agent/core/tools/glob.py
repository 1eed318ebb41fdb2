from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import os
import time
from pathlib import Path

from pydantic import Field

from agent.git import GitError, session_repo
from agent.fs import is_git_dir_name
from agent.core.tools.base import CallSummary, Tool, ToolArgs, ToolContext, ToolError
from agent.core.tools.files import open_regular
from agent.glob_pattern import (
    IGNORE_READ_LIMIT, IGNORE_WALK_SECONDS, GlobPatternError, IgnoreRules, compile_glob, glob_matches, ignore_rules, ignored_by,
)
from agent.core.tools.paths import display_path, resolve_in_root

MAX_RESULTS = 100


class GlobArgs(ToolArgs):
    pattern: str = Field(description='Glob pattern, e.g. "**/*.py" or "src/*.{ts,tsx}"')
    path: str | None = Field(None, description="Folder to search in (default: the repository root)")


def repo_files(root: Path) -> tuple[list[str], list[str]]:
    """Non-ignored files, relative to root, and the folders whose walk stopped at IGNORE_WALK_SECONDS.

    Git's own view, from the repository (or private journal) the session fixed when it started
    (agent/git.py: never a `.git` found now, nothing a config names runs); a folder holding
    its own `.git` is walked here, since git does not look inside. Without a session: a
    .gitignore walk.
    """
    deadline = time.monotonic() + IGNORE_WALK_SECONDS
    repo = session_repo(root)
    if repo is None:
        return walk_with_gitignore(root, deadline)
    try:
        out = repo.out("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=root)
    except GitError:
        return walk_with_gitignore(root, deadline)
    files: list[str] = []
    cut: list[str] = []
    for rel in os.fsdecode(out).split("\0"):
        if not rel or any(is_git_dir_name(part) for part in rel.split("/")):
            continue
        if rel.endswith("/"):
            found, stopped = walk_with_gitignore(root / rel, deadline)
            files.extend(rel + sub for sub in found)
            cut.extend(rel + sub for sub in stopped)
        elif (root / rel).is_file():
            files.append(rel)
    return files, cut


def _ignore_rules(folder: str) -> IgnoreRules | None:
    """The folder's .gitignore, if it is a regular file (opened without blocking: never a FIFO's wait),
    matched as git matches it, in time linear in the path whatever the patterns (agent.glob_pattern)."""
    try:
        fd, _ = open_regular(Path(folder) / ".gitignore", ".gitignore")
    except ToolError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(IGNORE_READ_LIMIT)
    except OSError:
        return None
    return ignore_rules(data)


def walk_with_gitignore(root: Path, deadline: float | None = None) -> tuple[list[str], list[str]]:
    """Files under `root` that no .gitignore on the way excludes (links are not followed), and the
    folders left unwalked because `deadline` (time.monotonic) passed: however slow the agent's
    patterns, one listing ends.

    An explicit stack, not os.walk (recursive in Python 3.11): a tree thousands of folders deep is
    walked like any other.
    """
    found: list[str] = []
    stack: list[tuple[str, list[tuple[str, IgnoreRules]]]] = [("", [])]
    while stack:
        rel_folder, inherited = stack.pop()
        folder = os.path.join(root, rel_folder) if rel_folder else str(root)
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        specs = inherited
        if any(e.name == ".gitignore" for e in entries):
            rules = _ignore_rules(folder)
            if rules is not None:
                specs = [*inherited, (rel_folder, rules)]

        for entry in sorted(entries, key=lambda e: e.name, reverse=True):
            if deadline is not None and time.monotonic() > deadline:
                return found, [folder or "./" for folder, _specs in [*stack, (rel_folder, specs)]]
            if is_git_dir_name(entry.name):
                continue
            rel = f"{rel_folder}{entry.name}"
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if not ignored_by(specs, rel, True):
                    stack.append((rel + "/", specs))
            elif not ignored_by(specs, rel, False):
                found.append(rel)
    return found, []


class GlobTool(Tool[GlobArgs]):
    name = "Glob"
    description = (
        "Find files by name pattern (** spans folders). Respects .gitignore. "
        "Returns paths relative to the repository root, newest first."
    )
    args_model = GlobArgs

    @classmethod
    def summary(cls, arguments: Mapping[str, Any]) -> CallSummary:
        where = f" in {arguments['path']}" if arguments.get("path") else ""
        return CallSummary(str(arguments.get("pattern", "")) + where)

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
        files, cut = repo_files(ctx.root)
        matches = [rel for rel in files if rel.startswith(prefix) and glob_matches(regex, rel[len(prefix):])]
        note = (
            f"\n(Listing stopped after {IGNORE_WALK_SECONDS:g} s: the .gitignore patterns in {', '.join(cut[:3])}"
            f"{' and others' if len(cut) > 3 else ''} take too long to match; files there may be missing.)" if cut else ""
        )
        if not matches:
            return "No files found" + note

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
        text += note
        return text
