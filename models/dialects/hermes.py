"""Hermes JSON tool calls (`hermes`: Qwen2.5 / Qwen3): detection, parser, stream markers, grammar,
trigger and tail check.

<tool_call>{"name": ..., "arguments": {...}}</tool_call>
"""

from __future__ import annotations

import re

from models.chat import ParsedTurn, ToolSpec
from models.dialects.base import StreamMarkers, ToolDialect, call_from_json, loads_json, split_reasoning
from models.grammar import JSON_RULES, ToolCallGrammar, json_call_rules

NAME = "hermes"
CALL_OPEN = "<tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


def detect(template: str) -> bool:
    return CALL_OPEN in template


class HermesParser:
    dialect = NAME

    def __init__(self, tools: list[ToolSpec] | None = None) -> None:
        self.tools = tools

    def parse(self, text: str, reasoning_opened: bool = False) -> ParsedTurn:
        reasoning, rest = split_reasoning(text, reasoning_opened)
        start = rest.find("<tool_call>")
        if start == -1:
            return ParsedTurn(content=rest.strip(), reasoning=reasoning)
        turn = ParsedTurn(content=rest[:start].strip(), reasoning=reasoning)
        for match in _BLOCK.finditer(rest, start):
            body = match.group(1).strip()
            if not match.group(0).endswith("</tool_call>"):
                turn.errors.append("a <tool_call> is not closed with </tool_call>")
                continue
            try:
                data = loads_json(body)
            except ValueError as exc:
                turn.errors.append(f"a <tool_call> does not hold valid JSON ({exc})")
                continue
            call = call_from_json(data, turn.errors)
            if call:
                turn.tool_calls.append(call)
        return turn


def grammar(tools: list[ToolSpec], opens_reasoning: bool) -> ToolCallGrammar:
    rules = json_call_rules(tools, ("name",))
    head = 'root ::= hcall ( ws hcall )* end-ws\nhcall ::= "<tool_call>" ws call ws "</tool_call>"\n'
    return ToolCallGrammar(head + rules.text() + JSON_RULES, NAME)


TRIGGER = re.compile(rb"<tool_call>")
_TAIL = re.compile(r'[ \t\n]{0,16}(?:\{[ \t\n]{0,16}(?P<key>"[a-z]*)?)?')


def tail_ok(matched: str, tail: str, names: list[str]) -> bool:
    found = _TAIL.fullmatch(tail)
    return found is not None and '"name"'.startswith(found.group("key") or "")


DIALECT = ToolDialect(
    name=NAME, detect=detect, parser=HermesParser, markers=StreamMarkers(calls=(CALL_OPEN,)),
    grammar=grammar, trigger=TRIGGER, tail_ok=tail_ok,
)
