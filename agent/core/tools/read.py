from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import difflib
import itertools
from pathlib import Path

from pydantic import Field

from agent.core.tools.base import CallSummary, Tool, ToolArgs, ToolContext, ToolError
from agent.core.tools.files import MAX_LINE_CHARS, MAX_WINDOW_BYTES, read_window
from agent.core.tools.paths import display_path, resolve_in_root

DEFAULT_LIMIT = 2000
SUGGEST_MAX_NAMES = 5000


class ReadArgs(ToolArgs):
    file_path: str = Field(description="Path of the file, absolute or relative to the repository root")
    offset: int | None = Field(None, ge=1, description="1-based line number to start at")
    limit: int | None = Field(None, ge=1, description="Number of lines to read (default 2000)")


# Tokens kept free in a budgeted result for the note that says where the rest is.
NOTE_TOKENS = 60


def format_line(number: int, line: str) -> str:
    """`<number right-aligned to 6>\\t<text>`, a long line cut and marked."""
    if len(line) > MAX_LINE_CHARS:
        line = line[:MAX_LINE_CHARS] + f" [... line cut at {MAX_LINE_CHARS} characters]"
    return f"{number:>6}\t{line}"


def format_numbered(lines: list[str], first: int) -> str:
    return "\n".join(format_line(number, line) for number, line in enumerate(lines, start=first))


def suggest_similar(root: Path, path: Path) -> str:
    """' Did you mean ...?' from names in the same folder (or the nearest existing parent)."""
    folder = path.parent
    while not folder.exists() and folder != root and root in folder.parents:
        folder = folder.parent
    if not folder.is_dir():
        return ""
    try:  # a folder of a million files: compare against the first few thousand names only
        names = [p.name for p in itertools.islice(folder.iterdir(), SUGGEST_MAX_NAMES) if p.name != ".git"]
    except OSError:
        return ""
    close = difflib.get_close_matches(path.name, names, n=3, cutoff=0.5)
    if not close:
        return ""
    return " Did you mean: " + ", ".join(display_path(root, folder / name) for name in close) + "?"


class ReadTool(Tool[ReadArgs]):
    name = "Read"
    description = (
        "Read a text file. Lines are numbered (number, tab, text). "
        "Use offset and limit to page through large files."
    )
    args_model = ReadArgs

    @classmethod
    def summary(cls, arguments: Mapping[str, Any]) -> CallSummary:
        extras = [f"{k}={arguments[k]}" for k in ("offset", "limit") if arguments.get(k) is not None]
        return CallSummary(str(arguments.get("file_path", "")), extras, limit=200)

    def run(self, args: ReadArgs, ctx: ToolContext) -> str:
        # A Bash output ribbit saved (agent.sandbox.output_spool) is the one thing Read reads outside the root.
        saved = ctx.outputs.owns(args.file_path) if ctx.outputs is not None else None
        path = saved or resolve_in_root(ctx.root, args.file_path)
        shown = args.file_path if saved else display_path(ctx.root, path)
        if not path.exists():
            raise ToolError(f"file {shown} does not exist.{suggest_similar(ctx.root, path)}")
        if path.is_dir():
            raise ToolError(f"{shown} is a directory, not a file; use Glob or Bash ls to list it")
        start = args.offset or 1
        window = read_window(path, shown, start, args.limit or DEFAULT_LIMIT)
        if window.binary:
            raise ToolError(f"{shown} is a binary file ({window.size} bytes); Read only shows text")
        if saved is None:
            ctx.read_state.record_stamp(path, window.stamp)
        if window.total == 0:
            return f"The file {shown} is empty."
        if start > window.total:
            raise ToolError(f"offset {start} is past the end of {shown}, which has {window.total} lines")
        numbered = [format_line(number, line) for number, line in enumerate(window.lines, start=start)]
        budget = ctx.budget
        kept = len(numbered)
        if budget.tokens is not None:
            kept = budget.head(numbered, max(1, budget.tokens - NOTE_TOKENS), min_lines=1)
        end = start + kept - 1
        result = "\n".join(numbered[:kept])
        if kept < len(numbered):
            result += (
                f"\n\n(Showing lines {start}-{end} of {window.total}; the rest did not fit this result's budget of "
                f"{budget.tokens} tokens. Read again with offset={end + 1} to see more.)"
            )
        elif end < window.total or start > 1:
            cut = f"; the window stops at {MAX_WINDOW_BYTES // 1024} KiB of text" if window.full and end < window.total else ""
            result += f"\n\n(Showing lines {start}-{end} of {window.total}{cut}. Use offset and limit to see more.)"
        return result
