"""`review` mode: the agent works in a temporary git worktree; its patch is reviewed hunk by hunk.

The worktree starts from a journal snapshot of the live checkout, so it includes the user's
uncommitted and untracked (non-ignored) files. Nothing touches the live checkout until the review:
approved hunks are applied atomically, only to files still as they were when the review started,
and the live journal records the result so `ribbit undo` can take it back. The worktree is
always removed.

`ReviewSession` is the reusable part; the `ribbit run --mode review` flow is app/run.py's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from agent.fs import ANYTHING, ApplyError, ChangedOnDisk, atomic_symlink, atomic_write, is_binary, remove_file, remove_tree, write_new_file
from agent.core.approvals import Approver, PatchHunkApprovalRequest, RejectAll
from agent.diffs import Hunk, apply_hunks, make_hunks
from agent.core.events import EventSink, NoticeEvent, SummaryEvent
from agent.git import GitRepo
from agent.undo.journal import GIT_ERRORS, Journal, JournalError, _one_line
from agent.undo.worktree import Blocked, TreeEntry
from agent.paths import state_home
from agent.core.loop import Limits, run_interruptibly
from agent.session.checkout_lock import CheckoutLock
from agent.session.store import SessionStore
from agent.session.workspace import Workspace, check_repo, open_workspace
from models.base import ChatModel

REVIEW_NAMESPACE = "refs/ribbit-review"


class ReviewFile(BaseModel):
    path: str  # relative to the repository root ribbit runs in
    status: Literal["added", "modified", "deleted"]
    binary: bool
    # Text files: the hunks of old -> new. Binary files and mode-only changes: none, and the
    # file is reviewed as one whole item (index 0).
    hunks: list[Hunk]
    executable: bool  # the agent's version has the executable bit
    was_executable: bool = False  # the version the review started from had it
    # Symbolic links (either side): the target, or None where that side is no link. A file that is or
    # becomes a link is one whole item: approving it makes (or removes) the link, rejecting leaves all.
    link: str | None = None
    was_link: str | None = None

    @property
    def links(self) -> bool:
        return self.link is not None or self.was_link is not None

    @property
    def mode_changes(self) -> bool:
        return self.status != "deleted" and self.executable != self.was_executable

    @property
    def mode_item(self) -> int | None:
        """The index of the item that approves the executable bit on its own (None: no such item).

        A mode change never rides along unseen with a text hunk: `chmod +x` on a file the user
        approves a one-line fix in would otherwise make it executable without anyone seeing it."""
        return len(self.hunks) if self.hunks and self.mode_changes else None

    @property
    def item_count(self) -> int:
        return len(self.hunks) + (1 if self.mode_item is not None else 0) or 1

    def mode_lines(self) -> list[str]:
        """git's own header lines for the mode change (none when the mode stays)."""
        if self.links:
            old = "120000" if self.was_link is not None else "100755" if self.was_executable else "100644"
            new = "120000" if self.link is not None else "100755" if self.executable else "100644"
            if self.status == "added":
                return [f"new file mode {new}"]
            if self.status == "deleted":
                return [f"deleted file mode {old}"]
            return [f"old mode {old}", f"new mode {new}"] if old != new else []
        if not self.mode_changes:
            return []
        new = "100755" if self.executable else "100644"
        if self.status == "added":
            return [f"new file mode {new}"]
        return [f"old mode {'100755' if self.was_executable else '100644'}", f"new mode {new}"]

    def item_diff(self, index: int) -> str:
        """The diff text shown for one hunk (or the whole file, or the mode change)."""
        a = "/dev/null" if self.status == "added" else f"a/{self.path}"
        b = "/dev/null" if self.status == "deleted" else f"b/{self.path}"
        head = [f"# hunk {index + 1} of {self.item_count}", *self.mode_lines(), f"--- {a}", f"+++ {b}"]
        if index == self.mode_item:
            what = "becomes executable" if self.executable else "stops being executable"
            return "\n".join([*head, f"(file mode only: {self.path} {what})"]) + "\n"
        if self.links:
            was = f"a symbolic link to {self.was_link!r}" if self.was_link is not None else "a file"
            now = f"a symbolic link to {self.link!r}" if self.link is not None else "a file"
            what = f"becomes {now}" if self.status == "added" else f"was {was}, deleted" if self.status == "deleted" else f"was {was}, becomes {now}"
            return "\n".join([*head, f"({self.path} {what})"]) + "\n"
        if not self.hunks:
            what = "binary file" if self.binary else "file mode"
            return "\n".join([*head, f"({what} {self.status})"]) + "\n"
        hunk = self.hunks[index]
        return "\n".join([*head, hunk.header, *hunk.lines]) + "\n"

    def executable_after(self, chosen: set[int]) -> bool:
        """The mode to write given the approved items: the agent's only where its change was approved."""
        if self.mode_item is None:
            return self.executable  # one whole item (or no mode change): approving it approves the mode
        return self.executable if self.mode_item in chosen else self.was_executable


class ReviewProposal(BaseModel):
    files: list[ReviewFile]
    patch: str  # the whole patch, `git diff` format

    def all_items(self) -> dict[str, list[int]]:
        return {f.path: list(range(f.item_count)) for f in self.files}


class ReviewResult(BaseModel):
    applied: dict[str, list[int]]  # path -> indices of the items applied
    skipped: dict[str, str]  # path -> why it was not applied
    patch: str  # what was applied to the live checkout, `git diff` format


class ReviewSession:
    """One agent run in a throwaway worktree, then its patch offered for review."""

    def __init__(
        self, model: ChatModel, root: Path, *, sink: EventSink, limits: Limits | None = None,
        no_sandbox: bool = False, reasoning: bool | None = None,
    ) -> None:
        self.root = check_repo(root)
        self.sink = sink
        self.live = Journal(self.root)
        self.live.keep_every_file()  # the applied patch printed at the end comes from its snapshots
        # The live checkout is written only when hunks are applied; another session writing meanwhile is told of.
        self.checkout = CheckoutLock(self.live.top, what="review mode")
        held = self.checkout.try_take()
        if held is None:
            self.live.sweep_temp_files()  # (another session's write in flight is no leftover)
        else:
            sink(NoticeEvent(level="warning", text=held + "; approved hunks are applied only once it has ended"))
        self.base = self.live.snapshot("review start")
        SessionStore(self.root).note_journaled(self.live.session_id)  # an applied review is undone like any session
        self._folder = Path(tempfile.mkdtemp(prefix="review-", dir=_worktree_home())).resolve()
        self._tree = self._folder / "tree"
        self._is_worktree = False
        self._end: str | None = None
        self.workspace: Workspace | None = None
        try:
            self._make_tree()
            work_root = self._tree if self.live.scope == "." else self._tree / self.live.scope
            work_root.mkdir(parents=True, exist_ok=True)
            self.workspace = open_workspace(
                model, work_root, mode="review", approver=RejectAll(), sink=sink, limits=limits,
                no_sandbox=no_sandbox, watch=False, journal_namespace=REVIEW_NAMESPACE, reasoning=reasoning,
            )
            self.workspace.journal.keep_every_file()  # what is reviewed and applied comes from the snapshot
        except BaseException:
            self.close()
            raise

    # -- the run --------------------------------------------------------------------------------

    def run(self, task: str) -> SummaryEvent:
        """Run the agent on `task` in the worktree; Ctrl+C stops it cleanly (the review still follows)."""
        assert self.workspace is not None
        return run_interruptibly(self.workspace.session, task)

    def proposal(self) -> ReviewProposal:
        """The agent's whole patch against the live state at the start, split into reviewable items.

        Contents come from the journal's snapshot of the worktree, never from reading its files
        again: what is reviewed is exactly what would be applied."""
        assert self.workspace is not None
        journal = self.workspace.journal
        end = journal.snapshot("end")
        self._end = end
        paths = journal.changed_between(journal.snapshots[0], end)
        files: list[ReviewFile] = []
        for rel in paths:
            old = self.live.read_blob(self.base, rel)
            new = journal.read_blob(end, rel)
            if old is None and new is None:
                continue
            status: Literal["added", "modified", "deleted"] = (
                "added" if old is None else "deleted" if new is None else "modified"
            )
            if (new is not None and new[1] == "120000") or (old is not None and old[1] == "120000"):
                if new is None and any(p.startswith(rel + "/") for p in paths):
                    continue  # a link the agent made a folder: the link stays, and what is under it is refused
                # A link is reviewed as one whole item, its target shown (it may lead out of the checkout).
                files.append(ReviewFile(
                    path=rel, status=status, binary=False, hunks=[],
                    executable=bool(new is not None and new[1] == "100755"),
                    was_executable=bool(old is not None and old[1] == "100755"),
                    link=os.fsdecode(new[0]) if new is not None and new[1] == "120000" else None,
                    was_link=os.fsdecode(old[0]) if old is not None and old[1] == "120000" else None,
                ))
                continue
            old_bytes = old[0] if old else b""
            new_bytes = new[0] if new else b""
            binary = is_binary(old_bytes) or is_binary(new_bytes)
            hunks = [] if binary else make_hunks(old_bytes.decode("utf-8"), new_bytes.decode("utf-8"))
            executable = bool(new is not None and new[1] == "100755")
            was_executable = bool(old is not None and old[1] == "100755")
            files.append(ReviewFile(path=rel, status=status, binary=binary, hunks=hunks, executable=executable,
                                    was_executable=was_executable))
        patch = journal.diff(journal.snapshots[0], end)
        return ReviewProposal(files=files, patch=patch)

    def apply(self, proposal: ReviewProposal, selection: dict[str, list[int]]) -> ReviewResult:
        """Apply the selected items to the live checkout, atomically per file.

        A file is only written if the live checkout still holds what the review started from,
        reached without links (a link planted at the file or any folder above it, into or out of
        the repository, is refused: agent/fs.py walks folders with O_NOFOLLOW when writing)."""
        assert self.workspace is not None
        journal = self.workspace.journal
        end = self._end or journal.snapshot("end")
        applied: dict[str, list[int]] = {}
        skipped: dict[str, str] = {}
        held = self.checkout.try_take()
        if held is not None:
            return ReviewResult(applied={}, skipped={f.path: held for f in proposal.files if selection.get(f.path)}, patch="")
        for review_file in proposal.files:
            chosen = sorted(i for i in set(selection.get(review_file.path, [])) if 0 <= i < review_file.item_count)
            if not chosen:
                continue
            rel = review_file.path
            live_path = self.root / rel
            old = self.live.read_blob(self.base, rel)
            why = self._live_differs(rel, old)
            if why:
                skipped[rel] = why
                continue
            # Compared again right before each write's rename: a save between the check above and the write loses nothing.
            expect = ANYTHING if old is not None and old[1] == "120000" else (old[0] if old else None)
            whole = len(chosen) == review_file.item_count
            if review_file.status == "added" and review_file.hunks and all(i == review_file.mode_item for i in chosen):
                continue  # the mode of a new file whose text was rejected: nothing to create
            try:
                if review_file.status == "deleted" and whole:
                    remove_file(live_path)
                elif review_file.link is not None:
                    atomic_symlink(live_path, review_file.link)
                elif review_file.binary or not review_file.hunks:
                    new = journal.read_blob(end, rel)
                    atomic_write(live_path, new[0] if new else b"", allow_binary=True, executable=review_file.executable,
                                 expect=expect)
                else:
                    old_text = (old[0] if old else b"").decode("utf-8")
                    text = apply_hunks(old_text, review_file.hunks, {i for i in chosen if i < len(review_file.hunks)})
                    atomic_write(live_path, text.encode("utf-8"), executable=review_file.executable_after(set(chosen)),
                                 expect=expect)
            except ChangedOnDisk:
                skipped[rel] = "changed in your checkout since the review started"
                continue
            except OSError as exc:
                skipped[rel] = f"could not be written: {exc.strerror if exc.strerror and not isinstance(exc, ApplyError) else exc}"
                continue
            applied[rel] = chosen
        patch = ""
        if applied:
            after = self.live.snapshot("review applied")
            patch = self.live.diff(self.base, after, sorted(applied))
        return ReviewResult(applied=applied, skipped=skipped, patch=patch)

    def _live_differs(self, rel: str, old: tuple[bytes, str] | None) -> str | None:
        """Why the live file is no longer what the review started from (None: it is)."""
        now = self.live.disk_state(rel)
        if isinstance(now, Blocked):
            return f"{now.at} is {now.kind} in your checkout"
        if old is None:
            return None if now is None else "created in your checkout since the review started"
        if not isinstance(now, TreeEntry) or (now.mode == "120000") != (old[1] == "120000") or self.live.blob_id(old[0]) != now.sha:
            return "changed in your checkout since the review started"
        return None

    def close(self) -> None:
        """Remove the worktree and its journal refs, whatever happened. Safe to call twice."""
        self.checkout.release()
        if self.workspace is not None:
            self.workspace.close()
            if self.workspace.journal.private:  # the copy's own journal goes with it
                shutil.rmtree(self.workspace.journal.git_dir, ignore_errors=True)
            session_id = self.workspace.journal.session_id
            try:
                refs = self.live.git.text("for-each-ref", "--format=%(refname)", f"{REVIEW_NAMESPACE}/{session_id}/")
                for ref in refs.split():
                    self.live.git.run("update-ref", "-d", ref)
            except GIT_ERRORS:
                pass
            self.workspace = None
        if self._is_worktree:
            try:
                self.live.git.run("worktree", "remove", "--force", str(self._tree))
            except GIT_ERRORS:
                pass
        try:
            remove_tree(self._folder)  # however deep the agent made it
        except OSError:
            pass
        if self._is_worktree:
            try:
                self.live.git.run("worktree", "prune")
            except GIT_ERRORS:
                pass
            self._is_worktree = False

    def __enter__(self) -> ReviewSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------------

    def _make_tree(self) -> None:
        """The worktree: a git worktree of the snapshot (or, for a private journal, a plain copy)."""
        try:
            if self.live.private:
                self._tree.mkdir()
                self._export_raw()
                return
            self.live.git.run("worktree", "add", "--detach", "--no-checkout", str(self._tree), self.base)
            self._is_worktree = True
            # Populate it ourselves: a plain checkout would run eol/smudge filters, and the agent
            # must see the user's exact bytes.
            tree_git = GitRepo(git_dir=Path(_worktree_git_dir(self._tree)), work_tree=self._tree)
            tree_git.run("read-tree", self.base)
            self._export_raw()
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot create the review worktree: {_one_line(exc)}") from None
        try:  # fresh stat data, so `git status` in the worktree is quick and quiet
            tree_git.run("update-index", "-q", "--refresh")
        except GIT_ERRORS:
            pass

    def _export_raw(self) -> None:
        """The start snapshot's files, exact bytes, into the fresh tree (no filters, no links followed)."""
        listing = self.live.git.out("ls-tree", "-r", "-z", self.base, "--", self.live.scope, env={"GIT_LITERAL_PATHSPECS": "1"})
        for record in filter(None, listing.split(b"\0")):
            info, _, name = record.partition(b"\t")
            mode, kind, sha = info.decode().split()
            if kind != "blob":
                continue
            target = self._tree / os.fsdecode(name)
            data = self.live._blob(sha)
            if mode == "120000":
                atomic_symlink(target, os.fsdecode(data))
            else:
                write_new_file(target, data, executable=mode == "100755")


def _worktree_git_dir(tree: Path) -> str:
    text = (tree / ".git").read_text().strip()
    return text.split(":", 1)[1].strip() if text.startswith("gitdir:") else str(tree / ".git")


def _worktree_home() -> Path:
    """Review worktrees live beside ribbit's state (same disk as the user's files, not a small /tmp)."""
    folder = state_home() / "worktrees"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def review_interactively(proposal: ReviewProposal, approver: Approver) -> dict[str, list[int]]:
    """Ask the approver about every hunk, in order; returns the approved ones."""
    selection: dict[str, list[int]] = {}
    for review_file in proposal.files:
        for index in range(review_file.item_count):
            decision = approver.decide(PatchHunkApprovalRequest(
                path=review_file.path, status=review_file.status, binary=review_file.binary,
                hunk_index=index, hunk_count=review_file.item_count, diff=review_file.item_diff(index),
            ))
            if decision.approved:
                selection.setdefault(review_file.path, []).append(index)
    return selection
