"""Plain JSON tool calls (`json`) for models whose chat template knows no tools (the embedded SmolLM2):
parser, stream markers, grammar, trigger and tail check. It is the registry's fallback.

The system prompt asks for one JSON object per call, optionally in a ```json fence:
{"tool": "Read", "arguments": {"file_path": "README.md"}}
"""

from __future__ import annotations

import re

from models.chat import ParsedTurn, ToolSpec
from models.dialects.base import StreamMarkers, ToolDialect, call_from_json, loads_json, split_reasoning
from models.grammar import JSON_RULES, ToolCallGrammar, json_call_rules

NAME = "json"
# An object that starts like a call; used to tell "no call" from "a call we could not read".
_ATTEMPT = re.compile(r"\{\s*\"(?:tool|name)\"\s*:")


def detect(template: str) -> bool:
    return True  # any template: the fallback


def json_objects(text: str) -> list[tuple[int, int, str]]:
    """(start, end, source) of each top-level {...} span, tracking strings so braces inside them don't count."""
    spans, depth, start, in_string, escape = [], 0, -1, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"' and depth:
            in_string = True
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1, text[start : i + 1]))
    return spans


class JsonFallbackParser:
    dialect = NAME

    def __init__(self, tools: list[ToolSpec] | None = None) -> None:
        self.tool_names = {t.name for t in tools or []}

    def parse(self, text: str, reasoning_opened: bool = False) -> ParsedTurn:
        reasoning, rest = split_reasoning(text, reasoning_opened)
        turn = ParsedTurn(content="", reasoning=reasoning)
        first_call = None
        for start, end, source in json_objects(rest):
            if not _ATTEMPT.match(source):
                continue
            try:
                data = loads_json(source)
            except ValueError as exc:
                turn.errors.append(f"a tool call is not valid JSON ({exc})")
                first_call = start if first_call is None else first_call
                continue
            call = call_from_json(data, turn.errors, name_keys=("tool", "name"))
            if call:
                turn.tool_calls.append(call)
                first_call = start if first_call is None else first_call
        attempts = _ATTEMPT.search(rest)
        if attempts and first_call is None and not turn.errors:
            turn.errors.append("a tool call was started but its JSON object is not closed")
            first_call = attempts.start()
        head = rest if first_call is None else rest[:first_call]
        turn.content = re.sub(r"```(?:json)?\s*$", "", head.strip()).strip()
        return turn


def grammar(tools: list[ToolSpec], opens_reasoning: bool) -> ToolCallGrammar:
    """Plain JSON calls `{"tool": NAME, "arguments": {...}}`, optionally closing a ```json fence."""
    rules = json_call_rules(tools, ("tool", "name"))
    head = 'root ::= call end-ws ( "```" end-ws )?\n'
    return ToolCallGrammar(head + rules.text() + JSON_RULES, NAME)


TRIGGER = re.compile(rb'\{[ \t\n]{0,16}"(?:tool|name)"')
_TAIL = re.compile(r'[ \t\n]{0,16}(?::[ \t\n]{0,16}(?:"(?P<name>[A-Za-z_]*))?)?')


def tail_ok(matched: str, tail: str, names: list[str]) -> bool:
    found = _TAIL.fullmatch(tail)
    return found is not None and any(n.startswith(found.group("name") or "") for n in names)


# The stream holds back the XML call markers, as it always did (a JSON call is only known once parsed).
DIALECT = ToolDialect(
    name=NAME, detect=detect, parser=JsonFallbackParser, markers=StreamMarkers(calls=("<tool_call>", "<function=")),
    grammar=grammar, trigger=TRIGGER, tail_ok=tail_ok, tools_in_prompt=True,
)
