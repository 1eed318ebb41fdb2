"""Parsed calls that cannot be run as they stand (nested too deep, not valid Unicode) become parse
errors before the loop runs anything; the text the conversation keeps is valid Unicode."""

from __future__ import annotations

from typing import Any

from agent.text import lone_surrogate, valid_unicode
from models.chat import ParsedTurn, ToolCall

# Tool arguments are flat (strings, numbers, flags); anything nested deeper than this is an attack
# or garbage, and would only meet a RecursionError somewhere further down (encoders, validation).
MAX_ARGUMENT_DEPTH = 32


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


def screened(parsed: ParsedTurn) -> ParsedTurn:
    """Calls that cannot be run as they stand (nested too deep, not valid Unicode) become parse
    errors, and the text the conversation keeps is valid Unicode (it is tokenized again later)."""
    kept = []
    for call in parsed.tool_calls:
        problem = call_problem(call)
        if problem:
            parsed.errors.append(problem)
        else:
            kept.append(call)
    parsed.tool_calls = kept
    parsed.content = valid_unicode(parsed.content)
    if parsed.reasoning is not None:
        parsed.reasoning = valid_unicode(parsed.reasoning)
    return parsed
