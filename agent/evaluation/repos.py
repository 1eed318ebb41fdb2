"""Git plumbing for evaluation: a private cache repository per task, worktrees, patches.

The user's repository is only ever read (cloned from). Each task gets a bare cache repo under the
output folder whose only ref is the base commit — so `git log --all` in the agent's worktree shows
no later history — and every job works in a fresh worktree of it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from pathlib import Path

from agent.evaluation.tasks import EvalTask
from agent.fs import ApplyError, atomic_write, read_regular, remove_file
from agent.git import GitError as SafeGitError
from agent.git import run_git
from models.text import one_line

BASE_REF = "refs/heads/eval-base"
BASE_FILE = "ribbit-eval-base"
# Build products that must never end up in a candidate patch.
EXCLUDES = "__pycache__/\n*.pyc\n.pytest_cache/\n"
# A plain folder becomes a git repo with this identity and date, so its commit is the same every time.
FIXED_COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "ribbit eval", "GIT_AUTHOR_EMAIL": "eval@ribbit.invalid",
    "GIT_COMMITTER_NAME": "ribbit eval", "GIT_COMMITTER_EMAIL": "eval@ribbit.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
}

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


class GitError(Exception):
    """A git step that failed; one line."""


def lock_for(key: Path) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(str(key), threading.Lock())


def git(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, check: bool = True) -> str:
    """The one wrapper for every git call here: agent/git.py runs it (no hook, filter or
    other configured program runs; no global or system config)."""
    try:
        proc = run_git(list(args), cwd=cwd, env=env, check=check)
    except SafeGitError as exc:
        raise GitError(str(exc)) from None
    return proc.stdout.decode("utf-8", "replace")


def prepare_cache(task: EvalTask, cache_root: Path) -> tuple[Path, str]:
    """(bare cache repo, base commit sha) for `task`, made once and reused (also across resumed runs)."""
    cache = cache_root / f"{task.id}.git"
    with lock_for(cache):
        marker = cache / BASE_FILE
        wanted = source_fingerprint(task)
        if marker.is_file():
            base, _, made_from = marker.read_text().strip().partition(" ")
            if made_from == wanted:
                return cache, base
        cache_root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{task.id}-", dir=cache_root))
        try:
            base = _build_cache(task, tmp)
            (tmp / BASE_FILE).write_text(f"{base} {wanted}\n")
            if cache.exists():
                shutil.rmtree(cache)
            tmp.rename(cache)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return cache, base


def source_fingerprint(task: EvalTask) -> str:
    """Changes when the task's repository or base does, so a stale cache is rebuilt."""
    digest = hashlib.sha256(f"{task.repo.resolve()}\0{task.base_commit}".encode())
    source = task.repo
    if source.is_file():
        stat = source.stat()
        digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    elif not _is_git_repo(source):  # a plain folder: its files' names, sizes and times
        for path in sorted(source.rglob("*")):
            if path.is_file():
                stat = path.stat()
                digest.update(f"{path.relative_to(source)}:{stat.st_size}:{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:16]


def _build_cache(task: EvalTask, tmp: Path) -> str:
    source = task.repo
    if source.is_file():  # a git bundle
        git("clone", "--bare", "-q", "--template=", str(source), str(tmp / "r"))
        _move_up(tmp)
    elif _is_git_repo(source):
        git("clone", "--bare", "-q", "--template=", "--no-tags", str(source), str(tmp / "r"))
        _move_up(tmp)
        # --no-tags skips tags, but the base may be reachable only from one: fetch it by name if needed.
    else:
        git("init", "--bare", "-q", "--template=", str(tmp))
        commit_folder(source, tmp)
    wanted = task.base_commit or "HEAD"
    base = _rev_parse(tmp, wanted)
    if base is None and task.base_commit:
        # Not in the clone (e.g. only behind a tag): fetch everything from the source, then retry.
        git("--git-dir", str(tmp), "fetch", "-q", str(source), "+refs/*:refs/source/*", check=False)
        base = _rev_parse(tmp, wanted)
    if base is None:
        raise GitError(f"base commit {wanted} is not in {source}")
    # Only the base stays reachable: later history would show the agent the answer.
    for ref in git("--git-dir", str(tmp), "for-each-ref", "--format=%(refname)").split():
        git("--git-dir", str(tmp), "update-ref", "-d", ref)
    git("--git-dir", str(tmp), "update-ref", BASE_REF, base)
    git("--git-dir", str(tmp), "symbolic-ref", "HEAD", BASE_REF)
    git("--git-dir", str(tmp), "config", "--unset-all", "remote.origin.url", check=False)
    git("--git-dir", str(tmp), "config", "--unset-all", "remote.origin.fetch", check=False)
    (tmp / "info").mkdir(exist_ok=True)
    (tmp / "info" / "exclude").write_text(EXCLUDES)
    return base


def commit_folder(folder: Path, git_dir: Path) -> str:
    """Commit a plain folder's files (respecting its .gitignore) at a fixed identity and date."""
    with tempfile.TemporaryDirectory(prefix="ribbit-eval-index-") as scratch:
        env = {
            "GIT_INDEX_FILE": str(Path(scratch) / "index"), "GIT_DIR": str(git_dir),
            "GIT_WORK_TREE": str(folder), **FIXED_COMMIT_ENV,
        }
        git("add", "-A", ".", cwd=folder, env=env)
        tree = git("write-tree", cwd=folder, env=env).strip()
        commit = git("commit-tree", tree, "-m", f"{folder.name}: task base", cwd=folder, env=env).strip()
    git("--git-dir", str(git_dir), "update-ref", "refs/heads/main", commit)
    git("--git-dir", str(git_dir), "symbolic-ref", "HEAD", "refs/heads/main")
    return commit


def add_worktree(cache: Path, path: Path, commit: str) -> Path:
    """A fresh checkout of `commit` at `path`, with its own .git inside it.

    A local clone rather than `git worktree add`: a worktree's git dir lives in the cache, which the
    sandbox may hide (its /tmp is private), and then git would not work for the agent.
    """
    if path.exists():
        remove_worktree(cache, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    git("clone", "-q", "--template=", "--local", "--no-checkout", str(cache), str(path))
    git("checkout", "-q", "--detach", commit, cwd=path)
    git("remote", "remove", "origin", cwd=path, check=False)
    (path / ".git" / "info").mkdir(exist_ok=True)
    (path / ".git" / "info" / "exclude").write_text(EXCLUDES)
    return path


def remove_worktree(cache: Path, path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def apply_patch(root: Path, patch: str) -> str | None:
    """Apply a unified diff to the worktree; None on success, else why not (one line)."""
    with tempfile.NamedTemporaryFile("w", suffix=".diff", delete=False, encoding="utf-8") as handle:
        handle.write(patch if patch.endswith("\n") else patch + "\n")
        name = handle.name
    try:
        proc = run_git(["apply", "--binary", "--whitespace=nowarn", name], cwd=root, check=False, timeout=120)
    except SafeGitError as exc:
        return str(exc)
    finally:
        os.unlink(name)
    if proc.returncode != 0:
        return one_line(proc.stderr, 300) or "git apply failed"
    return None


def restore_from_base(root: Path, base: str, files: list[str]) -> None:
    """Put `files` back as they are at `base` (deleting those that do not exist there). The worktree holds
    the model's patch: a removal goes one folder at a time without following links (agent.fs), and a link
    in the way stops it (LinkInTheWay); git's own checkout never writes through a link."""
    for name in files:
        if _exists_at(root, base, name):
            git("checkout", base, "--", name, cwd=root)
            continue
        try:
            remove_file(root.resolve() / name)
        except FileNotFoundError:
            pass
        except ApplyError as exc:
            raise LinkInTheWay(str(exc)) from None


class LinkInTheWay(Exception):
    """The model's patch put a link (or a file) where grading must write: the patch's doing, one line."""


def copy_over(source: Path, root: Path) -> list[str]:
    """Copy every file under `source` (the hidden tests) into the worktree, replacing; the relative paths.

    The worktree holds the model's patch, so any folder in it may be a link to a folder outside: each
    file is written one folder at a time without following links (agent.fs.atomic_write), and a link or
    a file in the way raises LinkInTheWay, writing nothing there. The source is the task's, read the same
    way: a link in it is refused (OSError), so a task cannot copy a file from elsewhere into the tests."""
    top, source = root.resolve(), source.resolve()
    files: list[tuple[str, bytes]] = []
    for folder, dirs, names in os.walk(source, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names) + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = Path(folder) / name
            rel = path.relative_to(source).as_posix()
            data = read_regular(path.absolute())
            if data is None:
                raise OSError(f"hidden test {rel} is a link or not a regular file: hidden tests must be plain files")
            files.append((rel, data))
    for rel, data in files:
        try:
            atomic_write(top / rel, data, allow_binary=True)
        except ApplyError as exc:
            raise LinkInTheWay(str(exc)) from None
    return sorted(rel for rel, _data in files)


def _exists_at(root: Path, base: str, name: str) -> bool:
    try:
        return run_git(["cat-file", "-e", f"{base}:{name}"], cwd=root, check=False).returncode == 0
    except SafeGitError:
        return False


def _rev_parse(git_dir: Path, rev: str) -> str | None:
    out = git("--git-dir", str(git_dir), "rev-parse", "-q", "--verify", f"{rev}^{{commit}}", check=False).strip()
    return out or None


def _is_git_repo(path: Path) -> bool:
    try:
        proc = run_git(["rev-parse", "--git-dir"], cwd=path, check=False)
        if proc.returncode != 0:
            return False
        # A plain folder inside some other repository is not itself a repository.
        top = run_git(["rev-parse", "--show-toplevel"], cwd=path, check=False)
    except SafeGitError:
        return False
    toplevel = top.stdout.decode("utf-8", "replace").strip()
    if top.returncode == 0 and toplevel:
        return Path(toplevel).resolve() == path.resolve()
    return True  # a bare repository


def _move_up(tmp: Path) -> None:
    """`git clone` wants a new folder; move the clone's contents up into tmp."""
    inner = tmp / "r"
    for item in inner.iterdir():
        item.rename(tmp / item.name)
    inner.rmdir()
