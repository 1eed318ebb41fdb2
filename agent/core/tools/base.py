"""What every tool shares: the argument model, the context it runs in, and how errors surface."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from agent.core.output_budget import OutputBudget
from agent.core.tools.errors import ToolError as ToolError  # the tools raise it from here
from models.chat import ToolSpec

if TYPE_CHECKING:
    from agent.core.approvals import ApprovalOrchestrator
    from agent.core.tools.changes import ChangeGate
    from agent.core.tools.readstate import ReadState
    from agent.sandbox.runner import CommandRunner
    from agent.sandbox.output_spool import SavedOutputs


class ToolArgs(BaseModel):
    # Unknown argument names are errors: a small model must learn the real names.
    model_config = ConfigDict(extra="forbid")


A = TypeVar("A", bound=ToolArgs)


@dataclass
class ShellState:
    """What Bash keeps between calls: its working directory (inside the repository)."""

    cwd: Path


@dataclass(frozen=True)
class ToolContext:
    """What one tool call runs with. The loop builds one per call (`for_call`); what lives longer than a
    call is in the objects it holds (read state, the edit gate, the shell's directory)."""

    root: Path
    read_state: ReadState
    changes: ChangeGate
    runner: CommandRunner
    # Where every tool asks the user: the one approval orchestrator.
    approvals: ApprovalOrchestrator
    shell: ShellState
    cancel: threading.Event = field(default_factory=threading.Event)
    # The call this context is for, so approvals can name it.
    tool_call_id: str = ""
    # Tokens one result may take (agent.core.output_budget; the loop sets it before each step) and where a
    # cut Bash output is saved for Read to page through (None: not saved).
    budget: OutputBudget = field(default_factory=OutputBudget)
    outputs: SavedOutputs | None = None

    def for_call(self, tool_call_id: str, budget: OutputBudget | None = None) -> ToolContext:
        """This context for one call: its id, and the step's output budget when given."""
        return replace(self, tool_call_id=tool_call_id, budget=budget if budget is not None else self.budget)


def compact_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The argument schema as the model sees it, without pydantic's verbose extras.

    Every token here is paid for in prompt processing on every launch, so `Optional[X] = None`
    is shown as plain X (not required) and titles and null defaults are dropped.
    """
    schema = model.model_json_schema()
    properties: dict[str, Any] = {}
    for name, prop in schema.get("properties", {}).items():
        prop = {k: v for k, v in prop.items() if k != "title"}
        options = prop.pop("anyOf", None)
        if options:
            kept = [o for o in options if o.get("type") != "null"]
            if len(kept) == 1:
                prop = {**kept[0], **prop}
            else:
                prop["anyOf"] = kept
        if prop.get("default", 0) is None:
            prop.pop("default")
        properties[name] = prop
    return {"type": "object", "properties": properties, "required": schema.get("required", [])}


@dataclass(frozen=True)
class CallSummary:
    """A call's one-line form in the transcript: the argument a reader scans for, clipped to `limit`
    characters, and a few extras shown beside it."""

    subject: str
    extras: list[str] = field(default_factory=list)
    limit: int = 70


class Tool(ABC, Generic[A]):
    name: ClassVar[str]
    description: ClassVar[str]
    args_model: ClassVar[type[ToolArgs]]
    # What the rest of ribbit reads about a tool (approvals, the session's snapshots, the transcript):
    # a new tool says it here and nowhere else.
    changes_files: ClassVar[bool] = False  # writes files itself: its step is snapshotted for undo
    runs_commands: ClassVar[bool] = False  # runs programs: sandboxed, snapshotted when the repository was writable
    allowed_in_plan_mode: ClassVar[bool] = True  # False: plan mode refuses it outright

    @classmethod
    def summary(cls, arguments: Mapping[str, Any]) -> CallSummary | None:
        """The transcript's one-line form of a call; None: every argument as `name=value`."""
        return None

    @classmethod
    def spec(cls) -> ToolSpec:
        return ToolSpec(name=cls.name, description=cls.description, parameters=compact_schema(cls.args_model))

    @abstractmethod
    def run(self, args: A, ctx: ToolContext) -> str:
        """Do the work; raise ToolError for anything the model should hear about."""
