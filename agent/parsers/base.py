"""What a parser turns one raw assistant turn into, and the pieces all dialects share."""

from __future__ import annotations

import json
from typing import Any, Protocol

from models.chat import ParsedTurn, ToolSpec

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


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
        return json.loads(text)
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
