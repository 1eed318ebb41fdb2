"""`ribbit undo`: the sessions the store lists, with what their journals hold, and undoing one.

The session store (agent.session.store) is the one listing; the journal answers for a session by its ID.
A session the store does not know (started before it listed every journaled session) is still undone
by its ID: the journal finds its snapshots under refs/ribbit/<ID>/."""

from __future__ import annotations

from pathlib import Path

from agent.session.checkout_lock import CheckoutLock
from agent.session.store import SessionStore
from agent.undo.journal import JournalError, SessionSnapshots, UndoResult, open_journals


def journaled_sessions(root: Path) -> tuple[list[SessionSnapshots], str]:
    """The sessions of `root` the store lists that a journal holds, oldest first, and where the journal
    is (for a message when there are none)."""
    journals = open_journals(root.resolve())
    left = set(SessionStore(root).session_ids())
    found: list[SessionSnapshots] = []
    for journal in journals:  # the repository's, then the private one where the folder had one first
        held = journal.snapshots_of(left)
        found += held
        left -= {s.session_id for s in held}
    found.sort(key=lambda s: (s.started, s.session_id))
    return found, journals[0].kind


def undo_session(root: Path, session_id: str | None = None, uncertain_too: bool = False) -> UndoResult:
    """Put back every file a session changed (None: the latest listed one that changed files and is not
    undone yet; with `uncertain_too`, undone or not). JournalError (one line) when it cannot."""
    journals = open_journals(root.resolve())
    if session_id is None:
        listed, _kind = journaled_sessions(root)
        pending = [s for s in listed if (uncertain_too or not s.reverted) and (s.steps > 0 or s.cut_short)]
        if not pending:
            raise JournalError("nothing to undo: no session that changed files is journaled here")
        session_id = pending[-1].session_id
    journal = next((j for j in journals if j.session_snapshots(session_id)), journals[0])
    lock = CheckoutLock(journal.top, what="ribbit undo")
    held = lock.try_take()  # a session writing in this repository now: its files are not put back under it
    if held is not None:
        raise JournalError(held)
    try:
        return journal.undo_session(session_id, uncertain_too)
    finally:
        lock.release()

