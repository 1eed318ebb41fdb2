"""Every git command ribbit runs goes through here, run so that git executes no program but itself.

A repository's config (and the user's global or system config, which ribbit does not read) can
make git run programs: hooks and core.hooksPath, core.fsmonitor, clean/smudge/process filters
named by any .gitattributes, textconv and external diff drivers, pagers, ssh and credential
helpers, gpg for signing or showing signatures, remote helpers, alternate-refs commands...
The agent can write .gitattributes files, create `.git` folders and, without a sandbox, more.
So every call here:

- names the repository explicitly (GIT_DIR and GIT_WORK_TREE, fixed when the session starts):
  git never discovers a `.git` on its own, so one the agent creates later is never used;
- reads no global or system config (GIT_CONFIG_GLOBAL=/dev/null, GIT_CONFIG_NOSYSTEM) and runs
  with a minimal environment (no inherited GIT_* variable, no pager, no prompts);
- overrides every config key that names a program, at command-line precedence (which wins over
  every config file, included ones too): the fixed keys below, plus each driver, helper and
  protocol key the repository's config defines (reading config executes nothing). Overrides go
  through GIT_CONFIG_KEY_n/VALUE_n, not `-c`, so a driver name containing `=` cannot dodge them;
- finds the git executable once, on absolute PATH entries outside the work tree.

The commands ribbit runs also avoid what would apply filters at all (objects are hashed with
--no-filters, diffs use --no-ext-diff --no-textconv, nothing is checked out by git): the
overrides are the second wall, not the only one.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import IO

from agent.fs import WRITE_NOWAIT_FLAGS, is_git_dir_name
from models.text import one_line as printable_line

GIT_TIMEOUT_S = 600.0
FIFO_GRACE_S = 2.0  # a git command still running after this long may be stuck on a FIFO
FIFO_POLL_S = 0.2

# Keys that make git run something, and the harmless value each gets. /dev/null is not a folder,
# so no hook can be found under it (pre-/post-*, reference-transaction, post-index-change...).
FIXED_OVERRIDES: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.pager", "cat"),
    ("core.editor", ":"),
    ("sequence.editor", ":"),
    ("core.sshCommand", ""),
    ("core.askPass", ""),
    ("core.gitProxy", ""),
    ("core.alternateRefsCommand", ""),
    ("credential.helper", ""),  # an empty value empties the helper list
    ("diff.external", ""),
    ("diff.submodule", "short"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("gpg.program", ""),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("protocol.allow", "never"),
    ("protocol.file.allow", "always"),
)
# Last part of a key whose value is a command (for any section and subsection the config defines).
_COMMAND_VARIABLES = frozenset({
    "clean", "smudge", "process", "textconv", "command", "cmd", "driver", "program", "helper",
    "sshcommand", "askpass", "gitproxy", "proxy", "vcs", "uploadpack", "receivepack", "editor",
    "pager", "alternaterefscommand", "defaultkeycommand", "packobjectshook", "difffilter", "external",
})
_KEPT_ENVIRONMENT = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "XDG_CONFIG_HOME", "SYSTEMROOT")
_HARDENED_ENVIRONMENT = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_SYSTEM": "/dev/null",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_PROTOCOL_FROM_USER": "0",
    "GIT_ADVICE": "0",
}


# Characters HFS+ ignores in names, so `.g\u200cit` is `.git` there (git's is_hfs_dotgit).


class GitError(Exception):
    """A git command failed or could not run; the message is one line."""


def command_overrides(config_keys: Iterable[str]) -> list[tuple[str, str]]:
    """Harmless values for every program-naming key among `config_keys`, then the fixed ones."""
    found: dict[str, str] = {}
    for key in config_keys:
        section, _, rest = key.partition(".")
        variable = rest.rpartition(".")[2].lower()
        section = section.lower()
        if section == "protocol" and variable == "allow":
            found[key] = "always" if key.lower() == "protocol.file.allow" else "never"
        elif section == "filter" and variable == "required":
            found[key] = "false"
        elif variable in _COMMAND_VARIABLES:
            found[key] = ""
    return [*found.items(), *FIXED_OVERRIDES]


def git_environment(overrides: Sequence[tuple[str, str]], extra: Mapping[str, str] | None = None,
                    *, work_tree: Path | None = None, read_user_config: bool = False) -> dict[str, str]:
    """A minimal environment for git: kept basics, hardening, config overrides, then `extra`.

    `read_user_config` keeps the user's global and system config visible: only for reading
    values with `git config --get` or `--list` (reading config runs nothing)."""
    env = {k: v for k, v in os.environ.items() if k in _KEPT_ENVIRONMENT or k.startswith("LC_")}
    env["PATH"] = os.pathsep.join(_safe_entries(env.get("PATH", os.defpath), _known_work_trees()))
    env.update(_HARDENED_ENVIRONMENT)
    if read_user_config:
        for key in ("GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_GLOBAL"):
            del env[key]
    env["GIT_CONFIG_COUNT"] = str(len(overrides))
    for n, (key, value) in enumerate(overrides):
        env[f"GIT_CONFIG_KEY_{n}"] = key
        env[f"GIT_CONFIG_VALUE_{n}"] = value
    env.update(extra or {})
    return env


def safe_search_path(path: str, work_tree: Path | None) -> str:
    """PATH without relative entries and without folders inside the work tree (the agent writes there)."""
    return os.pathsep.join(_safe_entries(path, (work_tree,) if work_tree is not None else ()))


@lru_cache(maxsize=64)
def _safe_entries(path: str, work_trees: tuple[Path, ...]) -> tuple[str, ...]:
    kept = []
    for entry in path.split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        if any(_is_within(Path(entry), folder) for folder in work_trees):
            continue
        kept.append(entry)
    return tuple(kept)


# Every folder ribbit has worked in, in this process: the agent may write there, so no git
# program is ever taken from a PATH entry inside one of them.
_work_trees: set[Path] = set()
_work_trees_lock = threading.Lock()


def _add_work_tree(folder: Path) -> None:
    resolved = folder.resolve()
    with _work_trees_lock:
        _work_trees.add(resolved)


def _known_work_trees() -> tuple[Path, ...]:
    with _work_trees_lock:
        return tuple(sorted(_work_trees))


def git_executable(work_tree: Path | None = None) -> str:
    """The git program: on an absolute PATH entry outside every work tree ribbit knows of.

    A folder ribbit starts working in later is excluded from then on."""
    folders = _known_work_trees()
    if work_tree is not None and work_tree.resolve() not in folders:
        folders = tuple(sorted({*folders, work_tree.resolve()}))
    return _find_git(os.environ.get("PATH", os.defpath), folders)


@lru_cache(maxsize=64)
def _find_git(path: str, work_trees: tuple[Path, ...]) -> str:
    """The first git on `path` outside `work_trees` (cached: those folders are where the agent
    writes; the entries left are outside its reach)."""
    for entry in _safe_entries(path, work_trees):
        candidate = os.path.join(entry, "git")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise GitError("git is not installed (no git on PATH outside the repository)")


def run_git(
    args: list[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    overrides: Sequence[tuple[str, str]] = FIXED_OVERRIDES,
    work_tree: Path | None = None,
    check: bool = True,
    pass_fds: Sequence[int] = (),
    timeout: float = GIT_TIMEOUT_S,
    read_user_config: bool = False,
    fifos: WorkTreeFifos | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run one git command hardened as this module says; GitError (one line) when it fails."""
    if read_user_config and not (args[:1] == ["config"] and ("--get" in args or "--list" in args)):
        raise ValueError("the user's own config is only ever read, with `git config --get` or `--list`")
    argv = [git_executable(work_tree or cwd), "--no-pager", *args]
    started = time.monotonic()
    try:
        with _input_file(input) as stdin:
            proc = subprocess.Popen(
                argv, cwd=str(cwd) if cwd else None,
                env=git_environment(overrides, env, work_tree=work_tree, read_user_config=read_user_config),
                stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=tuple(pass_fds),
            )
    except OSError as exc:
        raise GitError(f"git {_verb(args)} could not run: {exc.strerror or exc}") from None
    searched = False
    with proc:
        while True:
            quick = fifos is not None and (searched or bool(fifos.known))
            try:
                out, err = proc.communicate(timeout=FIFO_POLL_S if quick else FIFO_GRACE_S)
                break
            except subprocess.TimeoutExpired:
                waited = time.monotonic() - started
                if waited > timeout:
                    proc.kill()
                    proc.communicate()
                    raise GitError(f"git {_verb(args)} did not finish in {timeout:.0f} s") from None
                if fifos is not None and work_tree is not None:
                    if not searched and waited >= FIFO_GRACE_S:
                        fifos.search(work_tree)
                        searched = True
                    fifos.unblock()
    result = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    if check and result.returncode != 0:
        raise GitError(f"git {_verb(args)} failed: {one_line(err or out)}")
    return result


@contextmanager
def _input_file(data: bytes | None) -> Iterator[int | IO[bytes]]:
    """Standard input for git: `data` in an unlinked temporary file (or nothing).

    Not a pipe fed by communicate(): a command still running after the FIFO grace period is
    waited on again, and Popen.communicate cannot resume sending input on a retry (it raises
    ValueError if given the input again, and never sends the rest if not)."""
    if data is None:
        yield subprocess.DEVNULL
        return
    with tempfile.TemporaryFile() as handle:
        handle.write(data)
        handle.seek(0)
        yield handle


class WorkTreeFifos:
    """Git opens the work tree's .gitignore and .gitattributes files with a plain blocking open():
    one that is a FIFO (the agent can make one) would hang it, and ribbit with it. While a git
    command is slow, every such FIFO is opened for writing and closed at once, so git's open
    returns and it reads an empty file. They are looked for once a command has run FIFO_GRACE_S,
    and remembered, so a known one costs a short poll, not the wait."""

    def __init__(self) -> None:
        self.known: set[Path] = set()

    def search(self, work_tree: Path) -> None:
        self.known |= _find_ignore_fifos(work_tree)

    def unblock(self) -> None:
        for path in list(self.known):
            try:
                if not stat.S_ISFIFO(os.lstat(path).st_mode):
                    self.known.discard(path)
                    continue
                fd = os.open(path, WRITE_NOWAIT_FLAGS)
            except OSError:
                continue  # no reader waiting on it (ENXIO), or gone
            os.close(fd)


def _find_ignore_fifos(work_tree: Path) -> set[Path]:
    """FIFOs named .gitignore or .gitattributes anywhere under the work tree (no links followed)."""
    found: set[Path] = set()
    stack = [str(work_tree)]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if is_git_dir_name(entry.name):
                        continue
                    if entry.name in (".gitignore", ".gitattributes"):
                        if stat.S_ISFIFO(entry.stat(follow_symlinks=False).st_mode):
                            found.add(Path(entry.path))
                    elif entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return found


@dataclass
class GitRepo:
    """One repository, fixed when ribbit starts working on it: every call names it explicitly."""

    git_dir: Path
    work_tree: Path
    _overrides: list[tuple[str, str]] | None = field(default=None, repr=False)
    fifos: WorkTreeFifos = field(default_factory=WorkTreeFifos, repr=False)

    def __post_init__(self) -> None:
        _add_work_tree(self.work_tree)

    def run(
        self, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None,
        cwd: Path | None = None, check: bool = True, pass_fds: Sequence[int] = (), timeout: float = GIT_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[bytes]:
        extra = {"GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.work_tree), **(env or {})}
        return run_git(
            list(args), cwd=cwd or self.work_tree, env=extra, input=input, overrides=self.overrides(),
            work_tree=self.work_tree, check=check, pass_fds=pass_fds, fifos=self.fifos, timeout=timeout,
        )

    def objects_only(self, empty_folder: Path) -> GitRepo:
        """The same repository with an empty folder as its work tree: for commands that only need
        objects and refs, so they read no file the agent controls (.gitattributes included)."""
        empty_folder.mkdir(parents=True, exist_ok=True)
        return GitRepo(git_dir=self.git_dir, work_tree=empty_folder, _overrides=self.overrides())

    def out(self, *args: str, **kwargs: object) -> bytes:
        return self.run(*args, **kwargs).stdout  # type: ignore[arg-type]

    def text(self, *args: str, **kwargs: object) -> str:
        """Standard output as text; undecodable bytes (file names are bytes) survive as surrogates."""
        return os.fsdecode(self.out(*args, **kwargs))  # type: ignore[arg-type]

    def overrides(self) -> list[tuple[str, str]]:
        """The overrides for this repository's config (computed once; `refresh_overrides` redoes it)."""
        if self._overrides is None:
            self.refresh_overrides()
        assert self._overrides is not None
        return self._overrides

    def refresh_overrides(self) -> None:
        """Read the keys the repository's config defines (includes followed) and neutralise them."""
        proc = run_git(
            ["config", "--list", "--name-only", "-z"], cwd=self.work_tree,
            env={"GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.work_tree)}, work_tree=self.work_tree,
            check=False,
        )
        keys = [k for k in os.fsdecode(proc.stdout).split("\0") if k] if proc.returncode == 0 else []
        self._overrides = command_overrides(keys)


def find_repository(folder: Path) -> GitRepo | None:
    """The repository `folder` belongs to, as it is now (call once, when a session starts); None if none."""
    _add_work_tree(folder)
    proc = run_git(["rev-parse", "--absolute-git-dir", "--show-toplevel"], cwd=folder, check=False, work_tree=folder)
    if proc.returncode != 0:
        return None
    lines = os.fsdecode(proc.stdout).splitlines()
    if len(lines) != 2 or not lines[1]:
        return None  # a bare repository, or inside a .git folder: no work tree to journal
    return GitRepo(git_dir=Path(lines[0]).resolve(), work_tree=Path(lines[1]).resolve())


def init_private_repository(git_dir: Path, work_tree: Path) -> GitRepo:
    """A bare-layout git dir kept outside the work tree (no templates: no sample hooks)."""
    git_dir.parent.mkdir(parents=True, exist_ok=True)
    run_git(["init", "-q", "--bare", "--template=", str(git_dir)])
    repo = GitRepo(git_dir=git_dir, work_tree=work_tree)
    repo.run("config", "core.bare", "false")
    return repo


@dataclass(frozen=True)
class TrackedFiles:
    """The files git tracks under a folder (`ribbit quantize --calibrate DIR` reads them)."""

    top: Path  # the repository's work tree
    files: list[Path]  # under the folder asked about
    head: str | None  # the commit checked out (12 hex digits), None before the first


def tracked_files(folder: Path) -> TrackedFiles:
    """What git tracks under `folder`, asked through this module (DIR's own config runs nothing: its
    core.fsmonitor or hooks are overridden like every repository's). LookupError (one line) when `folder`
    is not in a repository's work tree or git cannot say."""
    try:
        repo = find_repository(folder)
        if repo is None:
            raise LookupError("not inside a git repository's work tree; calibration reads its tracked files")
        listing = repo.text("ls-files", "-z", cwd=folder, env={"GIT_LITERAL_PATHSPECS": "1"})
        head = repo.run("rev-parse", "--short=12", "--verify", "-q", "HEAD", check=False)
    except GitError as exc:
        raise LookupError(str(exc)) from None
    commit = os.fsdecode(head.stdout).strip() if head.returncode == 0 else None
    return TrackedFiles(top=repo.work_tree, files=[folder / name for name in listing.split("\0") if name], head=commit or None)


# Which repository each session root uses, decided when its session started (see Glob's listing).
_session_repos: dict[Path, GitRepo] = {}


def remember_session_repo(root: Path, repo: GitRepo) -> None:
    _session_repos[root.resolve()] = repo


def session_repo(root: Path) -> GitRepo | None:
    return _session_repos.get(root.resolve())


def one_line(data: bytes | str, limit: int = 300) -> str:
    """Git's message as one printable line."""
    return printable_line(data, limit) or "no message"


def shown(path: str) -> str:
    """A path for a one-line message: control characters and undecodable bytes escaped, long ones cut."""
    return printable_line(path, 120, fold=False, tail=50)


def unstorable_reason(rel: str, *, is_link: bool = False) -> str | None:
    """Why git cannot put this work-tree path in a tree (None if it can)."""
    plain = rel.isascii() and not rel.startswith(".") and not rel.endswith("/") and "/." not in rel and "//" not in rel
    if plain and "git" not in rel.lower():
        return None  # the common case, cheaply
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "not a valid path"
    if any(is_git_dir_name(part) for part in parts):
        return "git cannot store a path named like .git"
    if is_link and parts[-1].lower().rstrip(". ") == ".gitmodules":
        return "git cannot store .gitmodules as a link"
    return None


def _verb(args: Sequence[str]) -> str:
    """The git subcommand in `args` (skipping options and the values of -C, -c, --git-dir...)."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-C", "-c", "--git-dir", "--work-tree", "--namespace"):
            skip = True
        elif not arg.startswith("-"):
            return arg
    return "command"


def _is_within(path: Path, folder: Path) -> bool:
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):
        return True  # cannot tell: treat as unsafe
    return resolved == folder or resolved.is_relative_to(folder)


# -- committing the session's files (`/commit`, `ribbit run --commit`) --------------------------


def head_commit(repo: GitRepo) -> str | None:
    """HEAD's commit id, or None on an unborn branch."""
    proc = repo.run("rev-parse", "-q", "--verify", "HEAD^{commit}", check=False)
    return proc.stdout.decode().strip() or None if proc.returncode == 0 else None


def recent_subjects(repo: GitRepo, count: int = 10) -> list[str]:
    """The subjects of HEAD's last `count` commits, newest first (none on an unborn branch)."""
    if head_commit(repo) is None:
        return []
    out = repo.text("log", "-n", str(count), "--no-show-signature", "--format=%s", "HEAD", "--")
    return [line for line in out.splitlines() if line.strip()]


def _index_records(repo: GitRepo, paths: Sequence[str]) -> bytes:
    """`update-index -z --index-info` records for `paths` as they are on disk, hashed without filters (one
    git call for all regular files): a blob for a file or a link, a removal for anything else (deleted, a
    folder, a special file)."""
    files: list[tuple[str, str]] = []  # (path, mode)
    records: list[bytes] = []
    zero = "0" * len(repo.text("hash-object", "--stdin", input=b"").strip())
    for path in paths:
        full = repo.work_tree / path
        try:
            info = os.lstat(full)
        except OSError:
            info = None
        if info is not None and stat.S_ISLNK(info.st_mode):
            blob = repo.text("hash-object", "-w", "--stdin", input=os.fsencode(os.readlink(full))).strip()
            records.append(os.fsencode(f"120000 {blob}\t{path}"))
        elif info is not None and stat.S_ISREG(info.st_mode):
            mode = "100755" if info.st_mode & 0o111 else "100644"
            if "\n" in path:  # --stdin-paths reads lines: this one on its own
                blob = repo.text("hash-object", "-w", "--no-filters", "--", path).strip()
                records.append(os.fsencode(f"{mode} {blob}\t{path}"))
            else:
                files.append((path, mode))
        else:
            records.append(os.fsencode(f"0 {zero}\t{path}"))
    if files:
        listed = b"".join(os.fsencode(p) + b"\n" for p, _mode in files)
        blobs = repo.text("hash-object", "-w", "--no-filters", "--stdin-paths", input=listed).split()
        if len(blobs) != len(files):
            raise GitError("git hash-object did not hash every file")
        records += [os.fsencode(f"{mode} {blob}\t{path}") for (path, mode), blob in zip(files, blobs)]
    return b"".join(r + b"\0" for r in records)


def _tree_with(repo: GitRepo, paths: Sequence[str], index_file: Path) -> tuple[str, str | None]:
    """(tree, HEAD) where the tree is HEAD's with `paths` (top-relative) as they are on disk, built in a
    temporary index: the user's own index is not read or written."""
    env = {"GIT_INDEX_FILE": str(index_file), "GIT_LITERAL_PATHSPECS": "1"}
    head = head_commit(repo)
    if head is not None:
        repo.run("read-tree", head, env=env)
    repo.run("update-index", "-z", "--index-info", input=_index_records(repo, paths), env=env)
    return repo.text("write-tree", env=env).strip(), head


def changed_from_head(repo: GitRepo, paths: Sequence[str]) -> list[str]:
    """Those of `paths` (top-relative) whose content on disk differs from HEAD's."""
    if not paths:
        return []
    with tempfile.TemporaryDirectory(prefix="ribbit-commit-") as folder:
        tree, head = _tree_with(repo, paths, Path(folder) / "index")
    empty = repo.text("hash-object", "-t", "tree", "--stdin", input=b"").strip()
    base = f"{head}^{{tree}}" if head is not None else empty
    out = repo.out("diff-tree", "-r", "--name-only", "--no-renames", "-z", base, tree)
    return [os.fsdecode(p) for p in out.split(b"\0") if p]


def diff_from_head(repo: GitRepo, paths: Sequence[str], max_chars: int) -> str:
    """The unified diff of `paths` (top-relative) against HEAD, as committing them would make it, cut."""
    with tempfile.TemporaryDirectory(prefix="ribbit-commit-") as folder:
        tree, head = _tree_with(repo, paths, Path(folder) / "index")
    empty = repo.text("hash-object", "-t", "tree", "--stdin", input=b"").strip()
    base = f"{head}^{{tree}}" if head is not None else empty
    text = repo.text("diff-tree", "-r", "-p", "--no-renames", "--no-ext-diff", "--no-textconv", base, tree)
    return text if len(text) <= max_chars else text[:max_chars] + "\n[... diff cut ...]\n"


def user_identity(repo: GitRepo) -> dict[str, str]:
    """GIT_AUTHOR_*/GIT_COMMITTER_* from the repository's, the user's or the system's user.name and
    user.email (only read); GitError (one line) when either is missing."""
    values: dict[str, str] = {}
    for key in ("user.name", "user.email"):
        proc = run_git(["config", "--get", key], cwd=repo.work_tree, read_user_config=True, check=False,
                       env={"GIT_DIR": str(repo.git_dir)}, work_tree=repo.work_tree)
        value = proc.stdout.decode("utf-8", "replace").strip() if proc.returncode == 0 else ""
        if not value:
            raise GitError(f"git has no {key}: set it (git config --global {key} ...) and commit again")
        values[key] = value
    name, email = values["user.name"], values["user.email"]
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}


def commit_only(repo: GitRepo, paths: Sequence[str], message: str) -> str:
    """Commit exactly `paths` (top-relative), as they are on disk, on top of HEAD; the new commit's id.

    Built in a temporary index (HEAD's tree plus these paths), made with commit-tree (no hook runs) and
    moved in with update-ref against the HEAD it was built on (GitError if HEAD moved meanwhile). The
    user's own index then takes these paths' new entries and nothing else: their other staged and
    unstaged work stays as it was, and `git status` shows these paths clean."""
    identity = user_identity(repo)
    with tempfile.TemporaryDirectory(prefix="ribbit-commit-") as folder:
        tree, head = _tree_with(repo, paths, Path(folder) / "index")
    parent = ["-p", head] if head is not None else []
    if head is not None and tree == repo.text("rev-parse", f"{head}^{{tree}}").strip():
        raise GitError("nothing to commit: the session's files are as HEAD has them")
    commit = repo.text("commit-tree", "--no-gpg-sign", tree, *parent, "-F", "-", input=message.encode("utf-8"),
                       env=identity).strip()
    expected = head if head is not None else "0" * len(commit)
    subject = message.splitlines()[0] if message.strip() else ""
    repo.run("update-ref", "-m", f"commit (ribbit): {subject}", "HEAD", commit, expected)
    # The paths on standard input: any number of them, any name (git 2.26+).
    names = b"".join(os.fsencode(p) + b"\0" for p in paths)
    repo.run("reset", "-q", "--pathspec-from-file=-", "--pathspec-file-nul", commit, input=names,
             env={"GIT_LITERAL_PATHSPECS": "1"})
    return commit
