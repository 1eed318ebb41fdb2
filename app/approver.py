"""The agent's Approver for every front end: each question goes out with a Future and the agent thread
waits for it; Esc, cancel and quit answer every open question no at once. A front end says only how a
question goes out (`send`)."""

from __future__ import annotations

import threading
from concurrent.futures import Future

from agent.session import ApprovalDecision, ApprovalRequest

SHUTTING_DOWN = "ribbit is shutting down"


class FutureApprover:
    def __init__(self) -> None:
        self._pending: set[Future[ApprovalDecision]] = set()
        self._lock = threading.Lock()
        self._closed = False

    def send(self, request: ApprovalRequest, future: Future[ApprovalDecision]) -> bool:
        """Put the question before the user; False if it cannot go out (the front end is gone)."""
        raise NotImplementedError

    def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        future: Future[ApprovalDecision] = Future()
        with self._lock:
            if self._closed:
                return ApprovalDecision(approved=False, reason=SHUTTING_DOWN)
            self._pending.add(future)
        try:
            if not self.send(request, future):
                return ApprovalDecision(approved=False, reason=SHUTTING_DOWN)
            return future.result()
        finally:
            with self._lock:
                self._pending.discard(future)

    def reject_pending(self, reason: str) -> None:
        """Answer no to every open question, so the agent thread moves on at once."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            if not future.done():
                future.set_result(ApprovalDecision(approved=False, reason=reason))

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.reject_pending(SHUTTING_DOWN)
