"""What the repository's git config makes git run, or read as config, from the work tree.

ribbit's own git runs nothing (agent.git), but the user's does: `[include] path = ../.gitconfig` in
.git/config makes a work-tree file part of the config (it can set core.fsmonitor, which the next `git
status` runs), `core.hooksPath = .githooks` makes a tracked folder the hooks (husky, lefthook), and a
filter, diff or merge driver, fsmonitor, ssh command or helper can name a program in the tree. Such files
are code that runs later, like a `.pth`: asked for in auto-edit and named at the end of a task.

The config is read as git reads it (`git config --list --show-origin --includes`, the user's global
and system config too: a global `core.hooksPath = .githooks` is relative to each repository), through
agent.git, which runs nothing. It is read again only when a file it came from (or an include target,
or HEAD for `onbranch:` includes) changed.
"""

from __future__ import annotations

import functools
import os
import shlex
import threading
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from agent.git import GitError, GitRepo, find_repository, run_git, session_repo

# Keys (their last part, lower-cased) whose value is a command git runs: any word of it that is a path
# in the work tree is a program that runs later.
COMMAND_KEYS = frozenset({
    "fsmonitor", "sshcommand", "askpass", "gitproxy", "editor", "pager", "external", "textconv", "command",
    "clean", "smudge", "process", "driver", "program", "helper", "alternaterefscommand", "cmd", "tool",
    "difffilter", "packobjectshook", "defaultkeycommand", "uploadpack", "receivepack",
})
_FALSE = frozenset({"", "false", "no", "off", "0", "true", "yes", "on", "1"})
MAX_ORIGINS = 200


@dataclass
class GitRunsLater:
    """For one work tree: the files and folders (work-tree relative) git runs or reads as config, and why."""

    files: dict[str, str] = field(default_factory=dict)
    folders: dict[str, str] = field(default_factory=dict)
    watched: list[Path] = field(default_factory=list)  # what the answer depends on
    key: tuple[tuple[int, ...] | None, ...] = ()

    def why(self, rel: str) -> str | None:
        if rel in self.files:
            return self.files[rel]
        parts = PurePosixPath(rel).parts
        for depth in range(len(parts) - 1, 0, -1):
            why = self.folders.get("/".join(parts[:depth]))
            if why is not None:
                return why
        return None


_cache: dict[Path, GitRunsLater] = {}
_repos: dict[Path, GitRepo | None] = {}
_lock = threading.Lock()


def git_runs_later(root: Path, rel: str) -> str | None:
    """Why git would run `rel` (work-tree relative) or read it as config, per the config as it is now."""
    found = _current(_real(root))
    return found.why(rel) if found is not None else None


@functools.lru_cache(maxsize=64)
def _real(root: Path) -> Path:
    return root.resolve()  # a session's root does not move while it runs


def _current(root: Path) -> GitRunsLater | None:
    with _lock:
        repo = _repo(root)
        if repo is None:
            return None
        cached = _cache.get(root)
        if cached is not None and cached.key == _stat_keys(cached.watched):
            return cached
        found = _read(root, repo)
        found.key = _stat_keys(found.watched)
        _cache[root] = found
        return found


def _repo(root: Path) -> GitRepo | None:
    """The session's repository for `root` (fixed when it started), else the one `root` is in; remembered."""
    known = _repos.get(root)
    if known is not None:
        return known
    repo = session_repo(root)
    if repo is None and root not in _repos:
        try:
            repo = find_repository(root)
        except GitError:
            repo = None
    _repos[root] = repo
    return repo


def _read(root: Path, repo: GitRepo) -> GitRunsLater:
    found = GitRunsLater(watched=[repo.git_dir / "config", repo.git_dir / "config.worktree", repo.git_dir / "HEAD"])
    env = {"GIT_DIR": str(repo.git_dir), "GIT_WORK_TREE": str(repo.work_tree)}
    listing = _config_listing(["--includes"], repo, env, user=True)
    if listing is None:
        return found
    home = Path(os.environ.get("HOME") or Path.home())
    origins: list[Path] = []
    pending = _take(found, root, repo, home, listing, origins)
    # An include whose condition does not hold now (`includeIf "onbranch:release"`, `gitdir:`) holds later,
    # after the user's next `git switch`: what it would make git run counts already. Read as files, with
    # their own includes, whatever their conditions.
    while pending and len(origins) < MAX_ORIGINS:
        target = pending.pop(0)
        if target in origins or not target.is_file():
            continue
        listing = _config_listing(["--file", str(target), "--no-includes"], repo, env, user=False)
        if listing:
            pending += _take(found, root, repo, home, listing, origins)
        if target not in origins:
            origins.append(target)
    found.watched += origins
    return found


def _config_listing(args: list[str], repo: GitRepo, env: dict[str, str], *, user: bool) -> str | None:
    try:
        proc = run_git(["config", *args, "--list", "--show-origin", "-z"], cwd=repo.work_tree, env=env,
                       work_tree=repo.work_tree, check=False, timeout=30, read_user_config=user)
    except GitError:
        return None
    return os.fsdecode(proc.stdout) if proc.returncode == 0 else None


def _take(found: GitRunsLater, root: Path, repo: GitRepo, home: Path, listing: str, origins: list[Path]) -> list[Path]:
    """Count what one `--show-origin -z` listing makes git run or read; the include targets it names."""
    records = listing.split("\0")
    includes: list[Path] = []
    for origin, entry in zip(records[0::2], records[1::2]):
        key, _, value = entry.partition("\n")
        lowered = key.lower()
        path = _origin_file(origin, repo.work_tree)
        if path is not None and path not in origins and len(origins) < MAX_ORIGINS:
            origins.append(path)
            _add_file(found, root, path, "git config (git reads it, and runs the programs it names)")
        variable = lowered.rpartition(".")[2]
        if variable == "path" and (lowered == "include.path" or lowered.startswith("includeif.")):
            target = _target(value, path.parent if path is not None else repo.git_dir, home)
            if target is not None:
                found.watched.append(target)
                includes.append(target)
                _add_file(found, root, target, "git config included by the repository's config (git runs what it names)")
        elif lowered == "core.hookspath" and value:
            target = _target(value, repo.work_tree, home)
            if target is not None:
                rel = _inside(root, target)
                if rel is not None:
                    found.folders.setdefault(rel, "git hooks (core.hooksPath: git runs them)")
        elif variable in COMMAND_KEYS and value.strip().lower() not in _FALSE or value.lstrip().startswith("!"):
            for word in _words(value):  # a command: every word (`!` is how an alias or an update runs one)
                _add_file(found, root, repo.work_tree / word, f"a program git runs ({key})")
        else:
            # Any other key: a value naming a path in the work tree may be a program git runs (`pager.log`,
            # `browser.<tool>.path`, `sendemail.smtpServer`...); keys nobody listed count by default.
            for word in _words(value):
                if "/" in word and ":" not in word and "*" not in word:
                    _add_file(found, root, repo.work_tree / word, f"a path git config names ({key}: git may run it)")
    return includes


def _origin_file(origin: str, work_tree: Path) -> Path | None:
    if not origin.startswith("file:"):
        return None
    path = Path(origin[len("file:"):])
    return Path(os.path.normpath(path if path.is_absolute() else work_tree / path))


def _target(value: str, base: Path, home: Path) -> Path | None:
    if not value or value.startswith("%("):
        return None
    if value == "~" or value.startswith("~/"):
        return Path(os.path.normpath(home / value[2:]))
    target = Path(value)
    return Path(os.path.normpath(target if target.is_absolute() else base / target))


def _words(command: str) -> list[str]:
    """The words of a command that could be a path (`!` of an alias-style value and options left out)."""
    try:
        words = shlex.split(command.lstrip("!"))
    except ValueError:
        words = command.lstrip("!").split()
    return [w for w in words if w and not w.startswith("-") and "%" not in w and "$" not in w][:32]


def _inside(root: Path, target: Path) -> str | None:
    """`target` relative to the work tree (as named and as resolved), or None outside it."""
    for candidate in (target, _resolved(target)):
        if candidate.is_relative_to(root) and candidate != root:
            return candidate.relative_to(root).as_posix()
    return None


def _add_file(found: GitRunsLater, root: Path, target: Path, why: str) -> None:
    rel = _inside(root, target)
    if rel is not None and rel.split("/")[0] != ".git":
        found.files.setdefault(rel, why)


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path


def _stat_keys(paths: list[Path]) -> tuple[tuple[int, ...] | None, ...]:
    out: list[tuple[int, ...] | None] = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            out.append(None)
            continue
        out.append((info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns))
    return tuple(out)
