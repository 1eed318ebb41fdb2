"""`/commit` and `ribbit run --commit`: the files this session changed, committed with a message the model
drafted in the style of the repository's recent history.

Only the agent's files (the journal's `agent_paths`: the user's own changes and `!command`s left out,
ignored files too) and only where they differ from HEAD; the commit is made through the hardened git
(agent.git.commit_only: a temporary index, commit-tree, update-ref against the HEAD it was built on), so
the user's other staged and unstaged work is untouched and no hook runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agent.git import GitError, GitRepo, changed_from_head, commit_only, diff_from_head, recent_subjects
from agent.undo.journal import Journal, JournalError

# About 1,000 tokens of diff (half a minute of reading for FrogNano on two cores): the model made these
# changes in this conversation, so the diff reminds more than it teaches.
DIFF_CHARS = 4_000
DRAFT_TOKENS = 200

DRAFT_REQUEST = """ribbit: the user is committing the changes this session made. Make no tool call. Write \
only the commit message: a subject line of at most 72 characters in the style of the repository's recent \
subjects below, then, only if it helps, a blank line and a short body.

Recent subjects (newest first):
{subjects}

Files: {files}

The changes:
{diff}"""


class CommitError(Exception):
    """One line for the user: why there is nothing to commit, or why the commit failed."""


@dataclass(frozen=True)
class CommitPlan:
    repo: GitRepo
    paths: list[str]  # top-relative, as git names them
    shown: list[str]  # root-relative, as the user knows them


def plan_commit(journal: Journal, mode: str, written: Iterable[str]) -> CommitPlan:
    """What `/commit` would commit: the journal's agent paths and the files the agent `written` this session.
    CommitError (one line) in plan mode, outside git, or with nothing to commit. Runs git (a diff a step):
    call it off the UI thread."""
    if mode == "plan":
        raise CommitError("/commit is not available in plan mode (nothing may change); /mode ask first")
    if journal.private:
        raise CommitError("this folder is not a git repository: there is nothing to commit to (`git init` first)")
    root, top = journal.root, journal.top
    try:
        candidates = journal.agent_paths() | set(written)
    except JournalError as exc:
        raise CommitError(f"cannot read the journal: {exc}") from None
    ignored = journal.ignored(sorted(candidates)) if candidates else set()
    rels = sorted(p for p in candidates if p not in ignored)
    by_top = {(root / p).relative_to(top).as_posix(): p for p in rels}
    try:
        changed = changed_from_head(journal.git, sorted(by_top))
    except GitError as exc:
        raise CommitError(f"cannot compare with HEAD: {exc}") from None
    if not changed:
        raise CommitError("nothing to commit: this session changed no file that differs from HEAD")
    return CommitPlan(repo=journal.git, paths=changed, shown=[by_top.get(p, p) for p in changed])


def draft_request(plan: CommitPlan) -> str:
    subjects = recent_subjects(plan.repo)
    listed = "\n".join(f"- {s}" for s in subjects) if subjects else "(none yet: write a short imperative subject)"
    diff = diff_from_head(plan.repo, plan.paths, DIFF_CHARS)
    return DRAFT_REQUEST.format(subjects=listed, files=", ".join(plan.shown), diff=diff)


def clean_message(text: str) -> str:
    """The model's draft as a commit message: no code fences or quotes around it, no trailing space."""
    lines = [line.rstrip() for line in text.strip().splitlines()]
    lines = [line for line in lines if not line.startswith("```")]
    while lines and not lines[0].strip():
        lines.pop(0)
    if lines:
        lines[0] = lines[0].strip().strip("\"'`")
        if lines[0].lower().startswith(("subject:", "commit message:")):
            lines[0] = lines[0].split(":", 1)[1].strip()
    return "\n".join(lines).strip()


def make_commit(plan: CommitPlan, message: str) -> str:
    """Commit the plan's files with `message`; the new commit id. CommitError (one line) when it fails."""
    message = message.strip()
    if not message:
        raise CommitError("the commit message is empty: nothing was committed")
    try:
        return commit_only(plan.repo, plan.paths, message + "\n")
    except GitError as exc:
        raise CommitError(f"commit failed: {exc}") from None
