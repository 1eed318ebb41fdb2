"""`review` mode: the agent works in a temporary git worktree; its patch is reviewed hunk by hunk.

The worktree starts from a journal snapshot of the live checkout, so it includes the user's
uncommitted and untracked (non-ignored) files. Nothing touches the live checkout until the review:
approved hunks are applied atomically, only to files still as they were when the review started,
and the live journal records the result so `ribbit undo` can take it back. The worktree is
always removed.

`ReviewSession` is the reusable part (the TUI drives it); `run_review` is the `ribbit run` flow.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import IO, Literal

from pydantic import BaseModel

from agent.apply import atomic_write, is_binary, remove_file
from agent.approvals import Approver, PatchHunkApprovalRequest, RejectAll
from agent.diffs import Hunk, apply_hunks, make_hunks
from agent.events import EventSink, NoticeEvent, StopReason, SummaryEvent
from agent.journal import GIT_ERRORS, Journal, JournalError, state_home, _one_line
from agent.loop import Limits, run_interruptibly
from agent.workspace import Workspace, check_repo, open_workspace
from models.base import ChatModel

# Same as app/run.py's EXIT_CODES (agent/ may not import app/).
EXIT_CODES: dict[StopReason, int] = {
    "finished": 0, "error": 1, "max_steps": 3, "context": 3, "turn_tokens": 3, "interrupted": 130,
}
REVIEW_NAMESPACE = "refs/ribbit-review"


class ReviewFile(BaseModel):
    path: str  # relative to the repository root ribbit runs in
    status: Literal["added", "modified", "deleted"]
    binary: bool
    # Text files: the hunks of old -> new. Binary files and mode-only changes: none, and the
    # file is reviewed as one whole item (index 0).
    hunks: list[Hunk]
    executable: bool  # the agent's version has the executable bit

    @property
    def item_count(self) -> int:
        return len(self.hunks) or 1

    def item_diff(self, index: int) -> str:
        """The diff text shown for one hunk (or the whole file)."""
        a = "/dev/null" if self.status == "added" else f"a/{self.path}"
        b = "/dev/null" if self.status == "deleted" else f"b/{self.path}"
        head = [f"# hunk {index + 1} of {self.item_count}", f"--- {a}", f"+++ {b}"]
        if not self.hunks:
            what = "binary file" if self.binary else "file mode"
            return "\n".join([*head, f"({what} {self.status})"]) + "\n"
        hunk = self.hunks[index]
        return "\n".join([*head, hunk.header, *hunk.lines]) + "\n"


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
        self.live.sweep_temp_files()
        self.base = self.live.snapshot("review start")
        self._folder = Path(tempfile.mkdtemp(prefix="review-", dir=_worktree_home()))
        self._tree = self._folder / "tree"
        self._is_worktree = False
        self.workspace: Workspace | None = None
        try:
            self._make_tree()
            work_root = self._tree if self.live.scope == "." else self._tree / self.live.scope
            work_root.mkdir(parents=True, exist_ok=True)
            self.workspace = open_workspace(
                model, work_root, mode="review", approver=RejectAll(), sink=sink, limits=limits,
                no_sandbox=no_sandbox, watch=False, journal_namespace=REVIEW_NAMESPACE, reasoning=reasoning,
            )
        except BaseException:
            self.close()
            raise

    # -- the run --------------------------------------------------------------------------------

    def run(self, task: str) -> SummaryEvent:
        """Run the agent on `task` in the worktree; Ctrl+C stops it cleanly (the review still follows)."""
        assert self.workspace is not None
        return run_interruptibly(self.workspace.session, task)

    def proposal(self) -> ReviewProposal:
        """The agent's whole patch against the live state at the start, split into reviewable items."""
        assert self.workspace is not None
        journal = self.workspace.journal
        end = journal.snapshot("end")
        paths = journal.changed_between(journal.snapshots[0], end)
        work_root = journal.root
        files: list[ReviewFile] = []
        for rel in paths:
            old = self.live.read_blob(self.base, rel)
            new_path = work_root / rel
            new = new_path.read_bytes() if new_path.is_file() and not new_path.is_symlink() else None
            if new_path.is_symlink() or (old is not None and old[1] == "120000"):
                continue  # symlinks are not reviewed hunk by hunk; the agent rarely makes them
            if old is None and new is None:
                continue
            status: Literal["added", "modified", "deleted"] = (
                "added" if old is None else "deleted" if new is None else "modified"
            )
            old_bytes = old[0] if old else b""
            binary = is_binary(old_bytes) or (new is not None and is_binary(new))
            hunks = [] if binary else make_hunks(old_bytes.decode("utf-8"), (new or b"").decode("utf-8"))
            executable = bool(new is not None and os.stat(new_path).st_mode & 0o111)
            files.append(ReviewFile(path=rel, status=status, binary=binary, hunks=hunks, executable=executable))
        patch = journal.diff(journal.snapshots[0], end)
        return ReviewProposal(files=files, patch=patch)

    def apply(self, proposal: ReviewProposal, selection: dict[str, list[int]]) -> ReviewResult:
        """Apply the selected items to the live checkout, atomically per file."""
        assert self.workspace is not None
        work_root = self.workspace.journal.root
        applied: dict[str, list[int]] = {}
        skipped: dict[str, str] = {}
        for review_file in proposal.files:
            chosen = sorted(i for i in set(selection.get(review_file.path, [])) if 0 <= i < review_file.item_count)
            if not chosen:
                continue
            rel = review_file.path
            live_path = self.root / rel
            old = self.live.read_blob(self.base, rel)
            old_bytes = old[0] if old else None
            now = live_path.read_bytes() if live_path.is_file() else None
            if now != old_bytes:
                skipped[rel] = "changed in your checkout since the review started"
                continue
            whole = len(chosen) == review_file.item_count
            try:
                if review_file.status == "deleted" and whole:
                    remove_file(live_path)
                elif review_file.binary or not review_file.hunks:
                    data = (work_root / rel).read_bytes()
                    atomic_write(live_path, data, _mode_for(live_path, review_file.executable), allow_binary=True)
                else:
                    old_text = (old_bytes or b"").decode("utf-8")
                    text = apply_hunks(old_text, review_file.hunks, set(chosen))
                    atomic_write(live_path, text.encode("utf-8"), _mode_for(live_path, review_file.executable))
            except OSError as exc:
                skipped[rel] = f"could not be written: {exc.strerror or exc}"
                continue
            applied[rel] = chosen
        patch = ""
        if applied:
            after = self.live.snapshot("review applied")
            patch = self.live.diff(self.base, after, sorted(applied))
        return ReviewResult(applied=applied, skipped=skipped, patch=patch)

    def close(self) -> None:
        """Remove the worktree and its journal refs, whatever happened. Safe to call twice."""
        if self.workspace is not None:
            self.workspace.close()
            if self.workspace.journal.private:  # the copy's own journal goes with it
                shutil.rmtree(self.workspace.journal.git_dir, ignore_errors=True)
            session_id = self.workspace.journal.session_id
            try:
                refs = self.live._git("for-each-ref", "--format=%(refname)", f"{REVIEW_NAMESPACE}/{session_id}/")
                for ref in refs.split():
                    self.live._git("update-ref", "-d", ref)
            except GIT_ERRORS:
                pass
            self.workspace = None
        if self._is_worktree:
            try:
                self.live._git("worktree", "remove", "--force", str(self._tree))
            except GIT_ERRORS:
                pass
        shutil.rmtree(self._folder, ignore_errors=True)
        if self._is_worktree:
            try:
                self.live._git("worktree", "prune")
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
            self.live._git("worktree", "add", "--detach", "--no-checkout", str(self._tree), self.base)
            self._is_worktree = True
            # Populate it ourselves: a plain checkout would run eol/smudge filters, and the agent
            # must see the user's exact bytes.
            wt_env = {"GIT_DIR": _worktree_git_dir(self._tree), "GIT_WORK_TREE": str(self._tree)}
            self.live._git("read-tree", self.base, env=wt_env)
            self._export_raw()
        except GIT_ERRORS as exc:
            raise JournalError(f"cannot create the review worktree: {_one_line(exc)}") from None
        try:  # fresh stat data, so `git status` in the worktree is quick and quiet
            self.live._git("update-index", "-q", "--refresh", env=wt_env)
        except GIT_ERRORS:
            pass

    def _export_raw(self) -> None:
        listing = self.live._git("ls-tree", "-r", "-z", self.base, "--", self.live.scope)
        for record in filter(None, listing.split("\0")):
            info, _, rel = record.partition("\t")
            mode, kind, sha = info.split()
            if kind != "blob":
                continue
            target = self._tree / rel
            data = self.live._blob(sha)
            if mode == "120000":
                target.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(os.fsdecode(data), target)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                if mode == "100755":
                    target.chmod(0o755)


def _worktree_git_dir(tree: Path) -> str:
    text = (tree / ".git").read_text().strip()
    return text.split(":", 1)[1].strip() if text.startswith("gitdir:") else str(tree / ".git")


def _worktree_home() -> Path:
    """Review worktrees live beside ribbit's state (same disk as the user's files, not a small /tmp)."""
    folder = state_home() / "worktrees"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _mode_for(path: Path, executable: bool) -> int:
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    return mode | ((mode & 0o444) >> 2) if executable else mode & ~0o111


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


def run_review(
    model: ChatModel, args: argparse.Namespace, task: str, limits: Limits, sink: EventSink, approver: Approver,
    stdout: IO[str],
) -> int:
    """`ribbit run --mode review`: run, review each hunk on stdin, apply, print the applied patch."""
    review = ReviewSession(model, Path(args.repo), sink=sink, limits=limits, no_sandbox=args.no_sandbox,
                           reasoning=args.reasoning)
    try:
        summary = review.run(task)
        proposal = review.proposal()
        if not proposal.files:
            sink(NoticeEvent(level="info", text="review: the agent changed no files"))
        selection = review_interactively(proposal, approver)
        result = review.apply(proposal, selection)
    finally:
        review.close()
    for path, why in result.skipped.items():
        sink(NoticeEvent(level="warning", text=f"review: {path} not applied: {why}"))
    total = sum(f.item_count for f in proposal.files)
    done = sum(len(v) for v in result.applied.values())
    sink(NoticeEvent(level="info", text=f"review: applied {done} of {total} hunks to {review.root}"))
    if getattr(args, "patch_out", None):
        try:
            Path(args.patch_out).write_text(result.patch, encoding="utf-8")
        except OSError as exc:
            print(f"ribbit: error: cannot write the patch to {args.patch_out}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    else:
        stdout.write(result.patch)
        stdout.flush()
    return EXIT_CODES[summary.stop_reason]
