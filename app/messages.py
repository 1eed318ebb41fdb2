"""App-wide messages (toolong style: dataclasses in one place).

Messages go up: the agent bridge posts them from the agent's thread (post_message is thread-safe);
widgets post them to the app. Nothing here knows about widgets.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

from agent.session import ApprovalDecision, ApprovalRequest

if TYPE_CHECKING:
    from agent.session import Workspace
    from models.base import ChatModel


@dataclass
class EventsReady(Message):
    """The bridge has queued agent events; the app drains the whole queue at once (coalescing)."""

    def can_replace(self, message: Message) -> bool:
        # Any number of pending "events ready" pings collapse into one drain.
        return isinstance(message, EventsReady)


@dataclass
class ApprovalRequested(Message):
    """The agent thread is blocked on `future` until the user decides."""

    request: ApprovalRequest
    future: Future[ApprovalDecision] = field(repr=False)


@dataclass
class WorkspaceReady(Message):
    workspace: Workspace


@dataclass
class ModelLoaded(Message):
    """`/model SPEC` loaded a model (or could not: `error`, one line for the user)."""

    spec: str
    model: ChatModel | None = None
    error: str | None = None


@dataclass
class SetupFailed(Message):
    """The model or the workspace could not be opened; one line for the user. `model`: the model failed to
    load (another --model or `/model SPEC` can fix it), not the folder or the session."""

    text: str
    model: bool = False


@dataclass
class PromptSubmitted(Message):
    """The user pressed Enter in the prompt."""

    text: str


@dataclass
class RunFinished(Message):
    """The agent's run() returned (or raised); the prompt is free again."""

    error: str | None = None
    # The task was not sent (too long for the context): why, and the text to give back to the prompt.
    refused: str | None = None
    task: str | None = None
