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

    `read_user_config` keeps the user's global and system config visible: only for reading a
    value with `git config --get` (reading config runs nothing)."""
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
    if read_user_config and not (args[:1] == ["config"] and "--get" in args):
        raise ValueError("the user's own config is only ever read, with `git config --get`")
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


# Which repository each session root uses, decided when its session started (see Glob's listing).
_session_repos: dict[Path, GitRepo] = {}


def remember_session_repo(root: Path, repo: GitRepo) -> None:
    _session_repos[root.resolve()] = repo


def session_repo(root: Path) -> GitRepo | None:
    return _session_repos.get(root.resolve())


def shown(path: str) -> str:
    """A path for a one-line message: control characters and undecodable bytes escaped, long ones cut."""
    text = "".join(c if c.isprintable() and not 0xDC80 <= ord(c) <= 0xDCFF else repr(c)[1:-1] for c in path)
    return text if len(text) <= 120 else text[:60] + "…" + text[-50:]


def one_line(data: bytes | str, limit: int = 300) -> str:
    """Git's message as one printable line (control characters escaped)."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    text = " ".join(text.split())
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text[:limit] or "no message"


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
