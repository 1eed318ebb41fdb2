"""`@path` in a prompt: completion as the user types, and the named files handed to the model on send.

Completion matches in memory against the repository's file list (tracked and untracked, not ignored:
`git ls-files -co --exclude-standard`), built once per session off the UI thread and rebuilt after the
watcher or the agent changed files. Matching runs as compiled regular expressions over the whole list,
kept best-first and joined into one string, stopping at the last match wanted (C speed: bench/mentions.py).

On send, each `@file` is read as the Read tool would return it (same paging by the output budget, same
refusals: outside the repository, `.git/`, links out, special and binary files), and `@dir/` becomes a
listing of the files under it. A mention that names nothing is left as text (`@property` in a prompt).
"""

from __future__ import annotations

import functools
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from agent.core.output_budget import OutputBudget
from agent.core.tools import ToolContext, ToolError
from agent.core.tools.paths import display_path, resolve_in_root
from agent.core.tools.read import ReadArgs, ReadTool
from agent.git import GitError, GitRepo, shown

# `@path` at the start or after whitespace; `@"a path with spaces"` quoted.
MENTION = re.compile(r'(?:(?<=\s)|^)@(?:"([^"\n]+)"|(\S+))')
TRAILING = ",;:!?)]}'\"."  # punctuation after a path in prose: "look at @calc.py."
MAX_MENTIONS = 20
LISTING_NOTE_TOKENS = 40


class MentionRefused(ValueError):
    """One line for the user: an `@` names something the model may not be shown; nothing was sent."""


@dataclass(frozen=True)
class Attachment:
    path: str  # as the user wrote it, cleaned (root-relative)
    text: str  # what the model reads
    what: str  # one line for the user: "calc.py (2 lines)"


def mentions(text: str) -> list[str]:
    """The `@` paths in `text`, in order, each once."""
    found: list[str] = []
    for match in MENTION.finditer(text):
        path = match.group(1) or match.group(2)
        if path and path not in found:
            found.append(path)
    return found[:MAX_MENTIONS]


def mention_at_cursor(text: str, cursor: int) -> tuple[int, str] | None:
    """(where its `@` is, what follows it up to the cursor) when the cursor ends an `@word`; else None."""
    start = cursor
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    word = text[start:cursor]
    if not word.startswith("@") or word.startswith('@"'):
        return None
    return start, word[1:]


class FileIndex:
    """The repository's files for `@` completion; `refresh()` runs git (off the UI thread), `match()` does not."""

    def __init__(self, root: Path, repo: GitRepo | None) -> None:
        self.root = root
        self.repo = repo
        self.paths: list[str] = []
        self._joined = ""
        self._low = ""  # the same, lowercased: what match() scans
        self._lock = threading.Lock()
        self.built = False
        self.stale = True

    def invalidate(self) -> None:
        """Files were added or removed (the watcher saw it, or the agent wrote): rebuild before next use."""
        self.stale = True

    def refresh(self) -> None:
        """Rebuild the list from git (blocks: a worker thread calls it)."""
        self.stale = False
        paths = self._list()
        folders = {p[: i + 1] for p in paths for i in _slashes(p)}
        everything = sorted([*paths, *folders], key=_rank)  # match() takes the first matches as the best
        joined = "".join("\n" + p for p in everything)  # a newline before every line, the first too
        low = joined.lower()
        if len(low) != len(joined):  # a name whose lowercase is longer (rare): match it as it is
            low = joined
        with self._lock:
            self.paths = everything
            self._joined, self._low = joined, low
            self.built = True

    def _list(self) -> list[str]:
        if self.repo is None:
            return []
        try:
            out = self.repo.out("ls-files", "-co", "--exclude-standard", "-z", cwd=self.root)
        except GitError:
            return []
        return list({name for p in out.split(b"\0") if p and "\n" not in (name := os.fsdecode(p))})

    def match(self, query: str, limit: int = 8) -> list[str]:
        """Up to `limit` paths for `query`: a file or folder name starting with it first, then paths holding
        it, then paths holding its characters in order (fuzzy); shallower and shorter paths first in each.

        The list is kept in that order (`_rank`) and lowercased once, so each tier is one case-sensitive
        scan (which finds literals at C speed; IGNORECASE would not) that stops at the `limit`-th match."""
        with self._lock:
            joined, low = self._joined, self._low
        query = query.lower()
        if "\n" in query or not joined:
            return []
        if not query:
            return joined.split("\n", limit + 1)[1: limit + 1]
        q = re.escape(query)
        end = r"/?(?=\n|\Z)"  # the name runs to the end of its line (a folder's ends with /)
        # Every line starts after a newline (the list has one in front): a pattern that starts with a literal
        # is found by C's fast search, where `^` with MULTILINE would try every position in Python's VM.
        names = sorted([*self._starts(f"/{q}[^/\n]*{end}", low, limit), *self._starts(f"\n{q}[^/\n]*{end}", low, limit)])
        tiers = [names, self._starts(q, low, limit + len(names))]
        # Fuzzy only where it can find more: two characters or more, each somewhere in the list.
        if len(query) > 1 and all(c in low for c in set(query)):
            fuzzy = "\n" + "".join(f"[^{re.escape(c)}\n]*+{re.escape(c)}" for c in query)  # possessive: linear
            tiers.append(self._starts(fuzzy, low, limit * 2 + len(names)))
        picked: dict[int, None] = {}  # line starts, best first
        for tier in tiers:
            for line in tier:
                picked.setdefault(line)
                if len(picked) >= limit:
                    break
            if len(picked) >= limit:
                break
        return [joined[line: _line_end(joined, line)] for line in picked]

    @staticmethod
    def _starts(pattern: str, low: str, limit: int) -> list[int]:
        """Where the lines holding the first `limit` matches of `pattern` start, in order."""
        found: list[int] = []
        for match in _compiled(pattern).finditer(low):
            line = low.rfind("\n", 0, match.start() + 1) + 1  # a match may begin with its line's newline
            if not found or found[-1] != line:
                found.append(line)
                if len(found) >= limit:
                    break
        return found


def _line_end(text: str, start: int) -> int:
    end = text.find("\n", start)
    return len(text) if end < 0 else end


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _slashes(path: str) -> list[int]:
    return [i for i, c in enumerate(path) if c == "/"]


def _rank(path: str) -> tuple[int, str]:
    return path.count("/") * 8 + len(path), path


def _strip_trailing(root: Path, path: str) -> str:
    """`calc.py.` in prose names calc.py: drop trailing punctuation unless the path exists with it."""
    while path and path[-1] in TRAILING and not (root / path).exists():
        path = path[:-1]
    return path


def attach(text: str, ctx: ToolContext, budget: OutputBudget, index: FileIndex | None = None,
           missing: list[str] | None = None) -> list[Attachment]:
    """The attachments of every `@path` in `text`; MentionRefused (one line) for one that names a path the
    tools refuse. A path that names nothing is left as text (and added to `missing` if it looks like a path:
    a `/` or a `.` in it, so `@property` stays quiet)."""
    found: list[Attachment] = []
    root = ctx.root
    for raw in mentions(text):
        path = _strip_trailing(root, raw)
        if not path:
            continue
        try:
            resolved = resolve_in_root(root, path)
        except ToolError as exc:
            raise MentionRefused(f"@{shown(raw)}: {exc}") from None
        if not os.path.lexists(resolved) and not os.path.lexists(root / path):
            if missing is not None and ("/" in path or "." in path):
                missing.append(path)
            continue  # not a path: left as the text it is
        rel = display_path(root, resolved)
        if resolved.is_dir():
            found.append(_listing(rel, resolved, budget, index))
            continue
        try:
            body = ReadTool().run(ReadArgs(file_path=path), ctx.for_call("attach", budget))
        except ToolError as exc:
            raise MentionRefused(f"@{shown(raw)}: {exc}") from None
        lines = sum(1 for line in body.split("\n") if line[6:7] == "\t" and line[:6].strip().isdigit())  # shown
        found.append(Attachment(
            path=rel, what=f"{shown(rel)} ({lines} line{'' if lines == 1 else 's'})",
            text=f"The user attached @{rel}, as Read shows it:\n{body}",
        ))
    return found


def _listing(rel: str, folder: Path, budget: OutputBudget, index: FileIndex | None) -> Attachment:
    """`@dir/`: the files under it (the index's view: not ignored ones), paged like a tool result."""
    prefix = "" if rel == "." else rel.rstrip("/") + "/"
    if index is not None and index.built:
        names = [p[len(prefix):] for p in index.paths if p.startswith(prefix) and not p.endswith("/")]
    else:
        try:
            names = sorted(e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in os.scandir(folder)
                           if e.name != ".git")
        except OSError as exc:
            raise MentionRefused(f"@{shown(rel)}/: cannot list it ({exc.strerror or exc})") from None
    kept = len(names)
    if budget.tokens is not None:
        kept = budget.head(names, max(1, budget.tokens - LISTING_NOTE_TOKENS))
    body = "\n".join(names[:kept]) or "(no files)"
    if kept < len(names):
        body += f"\n\n(Showing {kept} of {len(names)} files; the rest did not fit. Use Glob to see more.)"
    shown_rel = prefix or "./"
    return Attachment(
        path=shown_rel, what=f"{shown(shown_rel)} ({len(names)} file{'' if len(names) == 1 else 's'})",
        text=f"The user attached @{shown_rel}, a listing of the files under it:\n{body}",
    )
