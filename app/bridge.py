"""The agent-thread boundary: the agent never touches a widget. It calls `EventBridge.sink` and
`TuiApprover.decide`, which only queue and post one coalescing `EventsReady` ping; the app drains the queue
on its own thread. An approval carries a Future that a review screen resolves."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from textual.message import Message

from agent.session import AgentEvent, ApprovalDecision, ApprovalRequest, ReasoningDelta, TextDelta, UsageEvent
from app.approver import FutureApprover
from app.messages import ApprovalRequested, EventsReady


# -- the agent-thread boundary -------------------------------------------------------------------


@dataclass(frozen=True)
class ContextSample:
    """Tokens in the model's context, read on the agent thread right after a turn."""

    used: int


QueueItem = AgentEvent | ApprovalRequested | ContextSample


def coalesce(items: list[QueueItem]) -> list[QueueItem]:
    """Merge runs of text (and of reasoning) deltas: one repaint per drain, not per token."""
    out: list[QueueItem] = []
    for item in items:
        last = out[-1] if out else None
        if isinstance(item, TextDelta) and isinstance(last, TextDelta):
            out[-1] = TextDelta(text=last.text + item.text)
        elif isinstance(item, ReasoningDelta) and isinstance(last, ReasoningDelta):
            out[-1] = ReasoningDelta(text=last.text + item.text)
        else:
            out.append(item)
    return out


class EventBridge:
    """The agent's EventSink: an ordered queue plus one coalescing ping (any thread)."""

    def __init__(self, post: Callable[[Message], object]) -> None:
        self._post = post
        self._queue: deque[QueueItem] = deque()
        self._lock = threading.Lock()
        self._deltas = 0
        self._ping_pending = False
        self.context_used: Callable[[], int] | None = None

    def sink(self, event: AgentEvent) -> None:
        items: list[QueueItem] = [event]
        if isinstance(event, UsageEvent) and self.context_used is not None:
            try:
                items.append(ContextSample(self.context_used()))
            except Exception:  # a backend that cannot say: the status bar keeps its last figure
                pass
        self._push(items, deltas=isinstance(event, (TextDelta, ReasoningDelta)))

    def push_approval(self, message: ApprovalRequested) -> None:
        self._push([message])

    def _push(self, items: list[QueueItem], deltas: bool = False) -> None:
        with self._lock:
            self._queue.extend(items)
            self._deltas += deltas
            if self._ping_pending:
                return  # the app has not drained yet; it will see these too
            self._ping_pending = True
        self._post(EventsReady())

    def drain(self) -> tuple[list[QueueItem], int]:
        """Everything queued so far, in order and coalesced, and how many raw deltas it held."""
        with self._lock:
            items = list(self._queue)
            self._queue.clear()
            deltas, self._deltas = self._deltas, 0
            self._ping_pending = False
        return coalesce(items), deltas


class TuiApprover(FutureApprover):
    """The agent's Approver in the TUI: post the request with its Future; the UI resolves it."""

    def __init__(self, bridge: EventBridge) -> None:
        super().__init__()
        self.bridge = bridge

    def send(self, request: ApprovalRequest, future: Future[ApprovalDecision]) -> bool:
        self.bridge.push_approval(ApprovalRequested(request=request, future=future))
        return True
