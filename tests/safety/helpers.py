"""Driving real agent sessions on real repositories for the safety tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

from agent.core.approvals import ApprovalDecision, ApprovalRequest
from agent.core.events import AgentEvent
from agent.session.workspace import Workspace, open_workspace
from models.base import Chunk, GenerationRequest
from models.replay import ReplayModel


class HookedReplay(ReplayModel):
    """The replay model, with a hook run before a given turn (to act 'from outside' mid-session)."""

    def __init__(self, path: Path, hooks: dict[int, Callable[[], None]] | None = None) -> None:
        super().__init__(path)
        self.hooks = hooks if hooks is not None else {}

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        hook = self.hooks.get(self.position)
        if hook:
            hook()
        yield from super().generate(request)


class Recorder:
    """An event sink that keeps everything."""

    def __init__(self) -> None:
        self.events: list[AgentEvent] = []

    def __call__(self, event: AgentEvent) -> None:
        self.events.append(event)

    def of_type(self, kind: str) -> list[AgentEvent]:
        return [e for e in self.events if e.type == kind]


class YesApprover:
    def __init__(self) -> None:
        self.requests: list[ApprovalRequest] = []

    def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        self.requests.append(request)
        return ApprovalDecision(approved=True)


def write_replay(path: Path, *turns: str) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
    return path


def start(
    root: Path, replay: Path, *, mode: str = "full-auto", hooks: dict[int, Callable[[], None]] | None = None,
    watch: bool = True, no_sandbox: bool = False,
) -> tuple[Workspace, Recorder]:
    recorder = Recorder()
    workspace = open_workspace(
        HookedReplay(replay, hooks), root, mode=mode, approver=YesApprover(), sink=recorder,  # type: ignore[arg-type]
        watch=watch, no_sandbox=no_sandbox,
    )
    return workspace, recorder


def tool_outputs(recorder: Recorder) -> list[str]:
    return [e.output for e in recorder.of_type("tool_result")]  # type: ignore[attr-defined]
