"""The undo journal: snapshots of the working tree as git commits under refs/ribbit/.

Each snapshot is built with a temporary index, so the user's index, HEAD, branches and stash are
never touched: we only add objects and private refs. A folder that is not a git repository gets a
private git dir (under the user's state folder) whose work tree is that folder, so the same code
serves both.

Refs: `refs/ribbit/<session>/<n>` is snapshot n of a session (0 = its start);
`refs/ribbit/<session>/undone/<n>` keeps a step that /undo took back (so it is never lost);
`refs/ribbit/<session>/reverted` marks a session that `ribbit undo SESSION` rolled back.

Undo restores exact bytes (blobs are stored without git's text/eol filters) and refuses to
overwrite a file that changed after the snapshot it would take back, unless ribbit made that change.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from typing import BinaryIO
from contextlib import contextmanager
from pathlib import Path

import git
from pydantic import BaseModel

from agent.apply import TEMP_SUFFIX, atomic_symlink, atomic_write, remove_file

RIBBIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "ribbit", "GIT_AUTHOR_EMAIL": "ribbit@localhost",
    "GIT_COMMITTER_NAME": "ribbit", "GIT_COMMITTER_EMAIL": "ribbit@localhost",
}
GIT_ERRORS = (git.GitCommandError, git.InvalidGitRepositoryError, git.NoSuchPathError, OSError, ValueError)
NAMESPACE = "refs/ribbit"
# Attributes that make `git add` change bytes (so a restore would not be byte-identical).
_CONVERTING_ATTRS = ("text", "eol", "crlf", "filter", "ident", "working-tree-encoding")
_NOT_TEMP = f":(exclude,glob)**/*{TEMP_SUFFIX}"
META_PREFIX = "ribbit-meta: "


class JournalError(Exception):
    """One-line, user-facing."""


class UndoResult(BaseModel):
    """What an undo did, paths relative to the folder ribbit runs in."""

    session_id: str
    undone: str  # "step 3" or "session"
    restored: list[str]  # written back with their earlier bytes
    deleted: list[str]  # files the agent had created, removed again
    kept: list[str] = []  # changed only by the user during the step: left as the user has them

    def summary(self) -> str:
        parts = [f"undid {self.undone} of session {self.session_id}"]
        if self.restored:
            parts.append("restored " + ", ".join(self.restored))
        if self.deleted:
            parts.append("removed " + ", ".join(self.deleted))
        if self.kept:
            parts.append("kept your changes to " + ", ".join(self.kept))
        if not self.restored and not self.deleted:
            parts.append("no files needed restoring")
        return "; ".join(parts)


class SessionInfo(BaseModel):
    session_id: str
    started: float  # unix time of the start snapshot
    steps: int  # snapshots after the start (steps that changed files)
    files: list[str]  # paths that differ between the session's start and its last snapshot
    reverted: bool


def state_home() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "ribbit"


def new_session_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + os.urandom(3).hex()


def private_git_dir(root: Path) -> Path:
    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return state_home() / "journals" / f"{root.resolve().name}-{key}.git"


def journal_kind(root: Path) -> str:
    """What `ribbit doctor` reports, without creating anything."""
    try:
        repo = git.Repo(root, search_parent_directories=True)
        return f"git refs/ribbit/ in {repo.git_dir}"
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return f"not a git repository: private journal in {private_git_dir(root)}"


class Journal:
    def __init__(self, root: Path, session_id: str | None = None, namespace: str = NAMESPACE) -> None:
        self.root = root.resolve()
        self.session_id = session_id or new_session_id()
        self.namespace = namespace
        try:
            self.repo = git.Repo(self.root, search_parent_directories=True)
            self.private = False
            top = Path(self.repo.working_tree_dir or self.root).resolve()
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            self.repo = self._private_repo()
            self.private = True
            top = self.root
        self.top = top
        self.git_dir = Path(self.repo.git_dir).resolve()
        # Only the part of the work tree ribbit was started in belongs to this session.
        self.scope = "." if top == self.root else self.root.relative_to(top).as_posix()
        self.snapshots: list[str] = []
        self.converting = self._uses_conversions()

    @property
    def kind(self) -> str:
        if self.private:
            return f"not a git repository: private journal in {self.git_dir}"
        return f"git refs/ribbit/ in {self.git_dir}"

    def ref(self, index: int) -> str:
        return f"{self.namespace}/{self.session_id}/{index}"

    # -- snapshots ------------------------------------------------------------------------------

    def snapshot(self, label: str, foreign: Iterable[str] = (), mixed: Iterable[str] = ()) -> str:
        """Commit the working tree (tracked + untracked non-ignored files); returns its sha.

        `foreign`: paths only someone else changed since the previous snapshot (kept on undo);
        `mixed`: paths both the agent and someone else changed (undo refuses them).
        A snapshot identical to the previous one is not recorded again.
        """
        try:
            tree = self.tree_now()
            if self.snapshots and tree == self._tree_of(self.snapshots[-1]) and label != "start":
                return self.snapshots[-1]
            meta = {"scope": self.scope, "label": label, "foreign": sorted(set(foreign)), "mixed": sorted(set(mixed))}
            parent = ["-p", self.snapshots[-1]] if self.snapshots else []
            commit = self._git(
                "commit-tree", tree, *parent, "-m", f"ribbit {self.session_id}: {label}\n\n{META_PREFIX}{json.dumps(meta)}",
                env=RIBBIT_IDENTITY,
            ).strip()
            self._git("update-ref", self.ref(len(self.snapshots)), commit)
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot snapshot the working tree: {_one_line(exc)}") from None
        self.snapshots.append(commit)
        return commit

    def tree_now(self) -> str:
        """The tree object of the working tree as it is now (scope only; the rest as in the index)."""
        with self._temp_index() as env:
            if self.converting:
                self._hash_without_filters(env)
            else:
                self._git("add", "-A", "--", self.scope, _NOT_TEMP, env=env)
            return self._git("write-tree", env=env).strip()

    def patch(self, start: int = 0) -> str:
        """`git diff` from snapshot `start` to the working tree now (as a fresh snapshot's tree)."""
        if not self.snapshots:
            return ""
        current = self.snapshot("end")
        return self.diff(self.snapshots[start], current)

    def diff(self, a: str, b: str, paths: Iterable[str] | None = None) -> str:
        """`git diff --binary` between two journal commits, paths relative to the folder ribbit runs in."""
        limit = [self._from_root(p) for p in paths] if paths is not None else [self.scope]
        if not limit:
            return ""
        try:
            out = self._git("diff", "--binary", "--no-color", "--no-ext-diff", "--no-renames", a, b, "--", *limit)
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot compute the session's patch: {_one_line(exc)}") from None
        if self.scope != ".":
            # Paths in the patch should be relative to the folder ribbit runs in.
            out = out.replace(f" a/{self.scope}/", " a/").replace(f" b/{self.scope}/", " b/")
            out = out.replace(f"--- a/{self.scope}/", "--- a/").replace(f"+++ b/{self.scope}/", "+++ b/")
        return out

    def read_blob(self, commit: str, rel: str) -> tuple[bytes, str] | None:
        """(bytes, git mode) of a root-relative path in a journal commit, or None if absent."""
        try:
            entry = self._entry(commit, self._from_root(rel))
            return (self._blob(entry[1]), entry[0]) if entry else None
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot read {rel} from the journal: {_one_line(exc)}") from None

    def changed_between(self, a: str, b: str) -> list[str]:
        """Root-relative paths that differ between two journal commits."""
        try:
            return [self._display(p) for p in self._changed(a, b)]
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot read the journal: {_one_line(exc)}") from None

    def sweep_temp_files(self) -> list[str]:
        """Remove `*.ribbit-tmp` files a killed ribbit left behind; returns their paths."""
        try:
            out = self._git("ls-files", "-z", "--others", "--", f":(glob){self._scope_glob()}**/*{TEMP_SUFFIX}")
        except GIT_ERRORS:
            return []
        removed = []
        for rel in filter(None, out.split("\0")):
            try:
                (self.top / rel).unlink()
                removed.append(rel)
            except OSError:
                pass
        return removed

    def ignored(self, rels: list[str]) -> set[str]:
        """Which of these root-relative paths git ignores (tracked files never are)."""
        if not rels:
            return set()
        data = "".join(str(self.root / rel) + "\0" for rel in rels).encode()
        try:
            status, out, _err = self.repo.git.execute(
                ["git", "check-ignore", "-z", "--stdin"], istream=_stdin(data), with_extended_output=True,
                with_exceptions=False, env={**os.environ, "GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.top)},
            )
        except GIT_ERRORS:
            return set()
        found = set()
        for path in filter(None, str(out).split("\0")):
            try:
                found.add(Path(path).resolve().relative_to(self.root).as_posix())
            except ValueError:
                continue
        return found

    # -- undo -----------------------------------------------------------------------------------

    def undo_last(self) -> UndoResult:
        """Put the files back as they were before the last step that changed them.

        Raises JournalError (one line) when there is nothing to undo or a file it would overwrite
        was changed after that step by someone other than ribbit.
        """
        if len(self.snapshots) < 2:
            raise JournalError("nothing to undo: the agent has not changed any file in this session")
        latest, previous = self.snapshots[-1], self.snapshots[-2]
        step = self._meta(latest).get("label", f"step {len(self.snapshots) - 1}")
        result = self._restore(previous, latest, [latest], undone=str(step))
        try:
            n = len(self.snapshots) - 1
            self._git("update-ref", f"{self.namespace}/{self.session_id}/undone/{n}", latest)
            self._git("update-ref", "-d", self.ref(n))
        except GIT_ERRORS as exc:
            raise JournalError(f"files restored, but the journal could not be updated: {_one_line(exc)}") from None
        self.snapshots.pop()
        return result

    def undo_session(self, session_id: str) -> UndoResult:
        """`ribbit undo SESSION`: every file the session changed goes back to its start state."""
        snapshots = self.session_snapshots(session_id)
        if not snapshots:
            known = ", ".join(s.session_id for s in self.sessions()[-3:]) or "none"
            raise JournalError(f"no ribbit session {session_id!r} in {self.kind} (recent: {known})")
        if self._ref_exists(f"{self.namespace}/{session_id}/reverted"):
            raise JournalError(f"session {session_id} was already undone")
        if len(snapshots) < 2:
            raise JournalError(f"nothing to undo: session {session_id} changed no files")
        scope = self._meta(snapshots[0]).get("scope", ".")
        if scope != self.scope:
            raise JournalError(f"session {session_id} ran in {self.top / scope}; run ribbit undo there")
        result = self._restore(snapshots[0], snapshots[-1], snapshots[1:], undone="session", session_id=session_id)
        try:
            self._git("update-ref", f"{self.namespace}/{session_id}/reverted", snapshots[-1])
        except GIT_ERRORS as exc:
            raise JournalError(f"files restored, but the journal could not be updated: {_one_line(exc)}") from None
        return result

    # -- listing --------------------------------------------------------------------------------

    def session_snapshots(self, session_id: str) -> list[str]:
        refs = self._refs()
        steps = refs.get(session_id, {})
        return [steps[n] for n in sorted(steps)]

    def sessions(self) -> list[SessionInfo]:
        """Every session journaled in this repository, oldest first."""
        infos = []
        reverted = self._reverted()
        for sid, steps in self._refs().items():
            ordered = [steps[n] for n in sorted(steps)]
            try:
                started = float(self._git("show", "-s", "--format=%ct", ordered[0]).strip() or 0)
                files = self._changed(ordered[0], ordered[-1]) if len(ordered) > 1 else []
            except GIT_ERRORS:
                continue
            infos.append(SessionInfo(
                session_id=sid, started=started, steps=len(ordered) - 1,
                files=[self._display(p) for p in files], reverted=sid in reverted,
            ))
        infos.sort(key=lambda s: (s.started, s.session_id))
        return infos

    # -- plumbing -------------------------------------------------------------------------------

    def _restore(
        self, target: str, latest: str, covered: list[str], *, undone: str, session_id: str | None = None,
    ) -> UndoResult:
        try:
            paths = self._changed(target, latest)
            now = self.tree_now()
            changed_since = set(self._changed(latest, now))
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot read the journal: {_one_line(exc)}") from None
        foreign: set[str] = set()
        mixed: set[str] = set()
        for commit in covered:
            meta = self._meta(commit)
            foreign |= {self._from_root(p) for p in meta.get("foreign", [])}
            mixed |= {self._from_root(p) for p in meta.get("mixed", [])}
        conflicts = sorted((changed_since & set(paths)) | (mixed & set(paths)))
        if conflicts:
            shown = ", ".join(self._display(p) for p in conflicts[:5]) + (" ..." if len(conflicts) > 5 else "")
            raise JournalError(
                f"cannot undo: {shown} changed after the agent's change (by you or another program); "
                "nothing was restored"
            )
        restored, deleted, kept = [], [], []
        for rel in paths:
            if rel in foreign:
                kept.append(self._display(rel))
                continue
            entry = self._entry(target, rel)
            full = self.top / rel
            try:
                if entry is None:
                    if full.is_symlink() or full.exists():
                        remove_file(full)
                        self._prune_empty_dirs(full.parent)
                    deleted.append(self._display(rel))
                    continue
                mode, blob = entry
                data = self._blob(blob)
                if mode == "120000":
                    atomic_symlink(full, os.fsdecode(data))
                elif mode in ("100644", "100755"):
                    if full.is_symlink() or full.is_dir():
                        _remove(full)
                    atomic_write(full, data, _file_mode(full, mode == "100755"), allow_binary=True)
                else:  # submodules: not ours to move
                    continue
                restored.append(self._display(rel))
            except OSError as exc:
                raise JournalError(f"cannot restore {self._display(rel)}: {exc.strerror or exc}") from None
        return UndoResult(
            session_id=session_id or self.session_id, undone=undone, restored=restored, deleted=deleted, kept=kept,
        )

    def _changed(self, a: str, b: str) -> list[str]:
        out = self._git("diff", "--name-only", "--no-renames", "-z", a, b, "--", self.scope)
        return [p for p in out.split("\0") if p]

    def _entry(self, commit: str, rel: str) -> tuple[str, str] | None:
        out = self._git("ls-tree", "-z", commit, "--", rel)
        for record in filter(None, out.split("\0")):
            info, _, name = record.partition("\t")
            if name == rel:
                mode, _kind, sha = info.split()
                return mode, sha
        return None

    def _tree_of(self, commit: str) -> str:
        return self._git("rev-parse", f"{commit}^{{tree}}").strip()

    def _meta(self, commit: str) -> dict:  # type: ignore[type-arg]
        try:
            body = self._git("show", "-s", "--format=%B", commit)
        except GIT_ERRORS:
            return {}
        for line in body.splitlines():
            if line.startswith(META_PREFIX):
                try:
                    value = json.loads(line[len(META_PREFIX):])
                    return value if isinstance(value, dict) else {}
                except ValueError:
                    return {}
        return {}

    def _refs(self) -> dict[str, dict[int, str]]:
        out = self._git("for-each-ref", "--format=%(refname) %(objectname)", self.namespace + "/")
        sessions: dict[str, dict[int, str]] = {}
        for line in out.splitlines():
            name, _, sha = line.partition(" ")
            parts = name[len(self.namespace) + 1:].split("/")
            if len(parts) == 2 and parts[1].isdigit():
                sessions.setdefault(parts[0], {})[int(parts[1])] = sha
        return sessions

    def _reverted(self) -> set[str]:
        out = self._git("for-each-ref", "--format=%(refname)", self.namespace + "/")
        return {
            line[len(self.namespace) + 1:].split("/")[0]
            for line in out.splitlines() if line.endswith("/reverted")
        }

    def _ref_exists(self, ref: str) -> bool:
        return bool(self._git("for-each-ref", "--format=%(refname)", ref).strip())

    def _display(self, rel: str) -> str:
        """Top-relative git path -> path relative to the folder ribbit runs in."""
        if self.scope != "." and rel.startswith(self.scope + "/"):
            return rel[len(self.scope) + 1:]
        return rel

    def _from_root(self, rel: str) -> str:
        return rel if self.scope == "." else f"{self.scope}/{rel}"

    def _scope_glob(self) -> str:
        return "" if self.scope == "." else self.scope + "/"

    def _prune_empty_dirs(self, folder: Path) -> None:
        while folder != self.root and folder.is_relative_to(self.root):
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent

    def _git(self, *args: str, env: dict[str, str] | None = None) -> str:
        """Every git call: explicit git dir and work tree, so a private journal works the same."""
        full_env = {**os.environ, "GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.top), **(env or {})}
        return self.repo.git.execute(
            ["git", "-c", "core.quotepath=off", "-c", "core.safecrlf=false", *args], env=full_env, strip_newline_in_stdout=False)

    def _blob(self, sha: str) -> bytes:
        out = self.repo.git.execute(
            ["git", "cat-file", "blob", sha], stdout_as_string=False, strip_newline_in_stdout=False,
            env={**os.environ, "GIT_DIR": str(self.git_dir)},
        )
        return out  # type: ignore[return-value]

    @contextmanager
    def _temp_index(self) -> Iterator[dict[str, str]]:
        """A throwaway index, seeded from the user's so unchanged files are not re-hashed."""
        folder = tempfile.mkdtemp(prefix="ribbit-index-")
        index = Path(folder) / "index"
        user_index = self.git_dir / "index"
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            if self.converting:
                # The user's index holds filtered blobs; start from HEAD's entries and re-hash.
                if self._has_head():
                    self._git("read-tree", "HEAD", env=env)
            elif user_index.is_file() and not self.private:
                # copy2 keeps the mtime, so git still re-hashes "racily clean" entries (same-second edits).
                shutil.copy2(user_index, index)
            yield env
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _has_head(self) -> bool:
        try:
            self._git("rev-parse", "--verify", "-q", "HEAD")
            return True
        except GIT_ERRORS:
            return False

    def _hash_without_filters(self, env: dict[str, str]) -> None:
        """`git add -A`, but storing the bytes on disk exactly (eol/text/filter attributes ignored)."""
        listing = self._git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", self.scope, _NOT_TEMP, env=env)
        paths = sorted(set(filter(None, listing.split("\0"))))
        regular, records = [], []
        for rel in paths:
            full = self.top / rel
            try:
                st = full.lstat()
            except FileNotFoundError:
                records.append(f"0 {'0' * 40}\t{rel}")  # removed from the index
                continue
            if stat.S_ISLNK(st.st_mode):
                sha = self.repo.git.execute(
                    ["git", "hash-object", "-w", "--stdin"], istream=_stdin(os.fsencode(os.readlink(full))),
                    env={**os.environ, "GIT_DIR": str(self.git_dir)},
                ).strip()
                records.append(f"120000 {sha}\t{rel}")
            elif stat.S_ISREG(st.st_mode):
                regular.append((rel, "100755" if st.st_mode & 0o111 else "100644"))
        if regular:
            shas = self._hash_paths([rel for rel, _ in regular])
            records += [f"{mode} {sha}\t{rel}" for (rel, mode), sha in zip(regular, shas)]
        if records:
            self.repo.git.execute(
                ["git", "update-index", "-z", "--index-info"], istream=_stdin("\0".join(records).encode() + b"\0"),
                env={**os.environ, "GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.top), **env},
            )

    def _hash_paths(self, rels: list[str]) -> list[str]:
        data = "".join(str(self.top / rel) + "\n" for rel in rels).encode()
        out = self.repo.git.execute(
            ["git", "hash-object", "-w", "--no-filters", "--stdin-paths"], istream=_stdin(data),
            env={**os.environ, "GIT_DIR": str(self.git_dir)},
        )
        return out.split()

    def _uses_conversions(self) -> bool:
        """Whether `git add` would rewrite bytes here (autocrlf, or text/eol/filter attributes)."""
        try:
            autocrlf = self._git("config", "--get", "core.autocrlf").strip().lower()
        except GIT_ERRORS:
            autocrlf = ""
        if autocrlf in ("true", "input"):
            return True
        try:
            listed = self._git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ":(glob)**/.gitattributes")
        except GIT_ERRORS:
            listed = ""
        candidates = [self.top / p for p in filter(None, listed.split("\0"))] + [self.git_dir / "info" / "attributes"]
        for path in candidates:
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            for line in text.splitlines():
                words = line.split()
                if words and not words[0].startswith("#"):
                    if any(w.lstrip("-!").split("=")[0] in _CONVERTING_ATTRS for w in words[1:]):
                        return True
        return False

    def _private_repo(self) -> git.Repo:
        git_dir = private_git_dir(self.root)
        try:
            if not git_dir.exists():
                git_dir.parent.mkdir(parents=True, exist_ok=True)
                repo = git.Repo.init(git_dir, bare=True)
                repo.git.config("core.bare", "false")
                repo.git.config("core.worktree", str(self.root))
            return git.Repo(git_dir)
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot create the private journal in {git_dir}: {_one_line(exc)}") from None


def _stdin(data: bytes) -> BinaryIO:
    """Standard input for a git call (GitPython wants a real file)."""
    handle = tempfile.TemporaryFile()
    handle.write(data)
    handle.seek(0)
    return handle


def _file_mode(path: Path, executable: bool) -> int:
    """Keep the mode the file has now, but with git's executable bit."""
    try:
        mode = stat.S_IMODE(path.lstat().st_mode) if not path.is_symlink() else 0o644
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    if executable:
        return mode | ((mode & 0o444) >> 2)
    return mode & ~0o111


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _one_line(exc: BaseException) -> str:
    text = str(getattr(exc, "stderr", "") or exc).strip()
    return " ".join(text.split())[:300]
