"""What a parser turns one raw assistant turn into, and the pieces all dialects share."""

from __future__ import annotations

import json
from typing import Any, Protocol

from agent.unicode_text import lone_surrogate
from models.chat import ParsedTurn, ToolCall, ToolSpec

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# Tool arguments are flat (strings, numbers, flags); anything nested deeper than this is an attack
# or garbage, and would only meet a RecursionError somewhere further down (encoders, validation).
MAX_ARGUMENT_DEPTH = 32


class ToolCallParser(Protocol):
    dialect: str

    def parse(self, text: str, reasoning_opened: bool = False) -> ParsedTurn: ...


def split_reasoning(text: str, reasoning_opened: bool) -> tuple[str | None, str]:
    """(reasoning, rest). Handles `<think>..</think>` and a close tag whose opening was in the prompt."""
    close = text.find(THINK_CLOSE)
    if close != -1:
        before, after = text[:close], text[close + len(THINK_CLOSE) :]
        open_at = before.find(THINK_OPEN)
        lead = ""
        if open_at != -1:
            lead, before = before[:open_at], before[open_at + len(THINK_OPEN) :]
        return before.strip(), (lead + after).lstrip("\n")
    stripped = text.lstrip()
    if stripped.startswith(THINK_OPEN):
        # Cut off mid-thought: everything is reasoning, nothing was said or called.
        return stripped[len(THINK_OPEN) :].strip(), ""
    return None, text


def loads_json(text: str) -> Any:
    """json.loads, with nesting too deep for the parser reported as bad JSON (ValueError)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("it is nested too deeply") from None


def nesting_depth(value: Any, limit: int = MAX_ARGUMENT_DEPTH) -> int:
    """How deeply lists and dicts nest in `value`, counted without recursion; stops past `limit`."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            break
        stack.extend((child, depth + 1) for child in children)
    return deepest


def call_problem(call: ToolCall) -> str | None:
    """Why a parsed call cannot be run as it stands (too deep, not valid Unicode), or None."""
    if lone_surrogate(call.name) is not None:
        return "a tool name holds a lone surrogate, which is not valid Unicode"
    if nesting_depth(call.arguments) > MAX_ARGUMENT_DEPTH:
        return f"the arguments of {call.name} nest more than {MAX_ARGUMENT_DEPTH} levels deep"
    stack: list[Any] = [call.arguments]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, str) and (at := lone_surrogate(item)) is not None:
            return (
                f"the arguments of {call.name} hold a lone surrogate (U+{ord(item[at]):04X}), "
                "which is not valid Unicode and cannot be written"
            )
    return None


def coerce_value(raw: str, schema: dict[str, Any] | None) -> Any:
    """XML parameters arrive as text; turn them into the type the tool's schema asks for."""
    types = schema_types(schema)
    if not types or types == {"string"}:
        return raw
    text = raw.strip()
    if "null" in types and text in ("null", "None", ""):
        return None
    if "string" in types:
        return raw
    try:
        return loads_json(text)
    except ValueError:
        lowered = text.lower()
        if "boolean" in types and lowered in ("true", "false"):
            return lowered == "true"
        return raw  # let argument validation name the problem


def schema_types(schema: dict[str, Any] | None) -> set[str]:
    if not schema:
        return set()
    if "type" in schema:
        kind = schema["type"]
        return set(kind) if isinstance(kind, list) else {kind}
    found: set[str] = set()
    for option in schema.get("anyOf", []) + schema.get("oneOf", []):
        found |= schema_types(option)
    return found


def param_schemas(tools: list[ToolSpec] | None) -> dict[str, dict[str, dict[str, Any]]]:
    return {t.name: t.parameters.get("properties", {}) for t in tools or []}


def call_id(index: int, prefix: str = "call") -> str:
    return f"{prefix}_{index}"
