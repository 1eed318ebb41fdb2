from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

import pathspec
from pydantic import Field

from agent.gitcmd import GitError, is_git_dir_name, session_repo
from agent.tools.base import Tool, ToolArgs, ToolContext, ToolError
from agent.tools.paths import display_path, resolve_in_root

MAX_RESULTS = 100


class GlobArgs(ToolArgs):
    pattern: str = Field(description='Glob pattern, e.g. "**/*.py" or "src/*.{ts,tsx}"')
    path: str | None = Field(None, description="Folder to search in (default: the repository root)")


def expand_braces(pattern: str) -> list[str]:
    """'a/*.{py,pyi}' -> ['a/*.py', 'a/*.pyi'] (nested braces too)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [p for option in match.group(1).split(",") for p in expand_braces(head + option + tail)]


@lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Glob -> regex: `**/` spans folders, `*` and `?` stay inside one path segment."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape("["))
                i += 1
            else:
                body = pattern[i + 1 : end].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def repo_files(root: Path) -> list[str]:
    """Non-ignored files, relative to root.

    Git's own view, from the repository (or private journal) the session fixed when it started
    (agent/gitcmd.py: never a `.git` found now, nothing a config names runs); a folder holding
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


def walk_with_gitignore(root: Path) -> list[str]:
    found: list[str] = []
    specs: list[tuple[str, pathspec.PathSpec]] = []
    for folder, dirs, files in os.walk(root):
        rel_folder = os.path.relpath(folder, root).replace(os.sep, "/")
        rel_folder = "" if rel_folder == "." else rel_folder + "/"
        ignore_file = Path(folder) / ".gitignore"
        if ignore_file.is_file():
            try:
                with ignore_file.open("rb") as handle:  # a regular file (is_file); at most 1 MiB of it
                    lines = handle.read(1 << 20).decode("utf-8", "replace").splitlines()
                specs.append((rel_folder, pathspec.PathSpec.from_lines("gitignore", lines)))
            except OSError:
                pass

        def ignored(rel: str) -> bool:
            return any(rel.startswith(base) and spec.match_file(rel[len(base):]) for base, spec in specs)

        dirs[:] = [d for d in dirs if not is_git_dir_name(d) and not ignored(f"{rel_folder}{d}/")]
        found.extend(f"{rel_folder}{name}" for name in files if not is_git_dir_name(name) and not ignored(f"{rel_folder}{name}"))
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
        regexes = [glob_regex(p) for p in expand_braces(pattern)]
        matches = [
            rel for rel in repo_files(ctx.root)
            if rel.startswith(prefix) and any(rx.match(rel[len(prefix):]) for rx in regexes)
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
