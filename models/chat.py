"""Chat data that crosses the agent/model boundary: messages, tool calls, tool specs.

These mirror the OpenAI chat-completions shapes because the transcript (docs/contract.md) is written in
that form and the OpenAI-compatible backend sends them as-is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(BaseModel):
    """One parsed call: `arguments` is already a dict (the transcript stores it as a JSON string)."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }


class ChatMessage(BaseModel):
    role: Role
    content: str = ""
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    # Name of the tool a `tool` message answers; templates without tool support need it.
    name: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """The docs/contract.md transcript / OpenAI wire form."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.role == "assistant":
            out["reasoning_content"] = self.reasoning_content
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls] if self.tool_calls else None
        if self.role == "tool":
            out["tool_call_id"] = self.tool_call_id
            if self.name:
                out["name"] = self.name
        return out

    def to_template(self) -> dict[str, Any]:
        """The form chat templates expect: tool-call arguments as mappings, not JSON strings."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.reasoning_content is not None:
            out["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out


class ToolSpec(BaseModel):
    """What the model is shown about one tool: name, description, JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass
class ParsedTurn:
    """One raw assistant turn as a dialect's parser reads it (models/dialects)."""

    content: str
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    # What was wrong with tool-call markup; non-empty means the turn is malformed.
    errors: list[str] = field(default_factory=list)
