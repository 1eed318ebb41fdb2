"""Qwen3-Coder XML tool calls (`qwen3_coder`: FrogNano / Qwen3.5): detection, parser, stream markers,
grammar, trigger and tail check.

<tool_call>
<function=NAME>
<parameter=ARG>
VALUE
</parameter>
</function>
</tool_call>
"""

from __future__ import annotations

import re
from typing import Any

from models.chat import ParsedTurn, ToolCall, ToolSpec
from models.dialects.base import StreamMarkers, ToolDialect, coerce_value, param_schemas, split_reasoning
from models.grammar import JSON_RULES, ToolCallGrammar, Rules, literal, rule_name, xml_text_rules, xml_value_rule

NAME = "qwen3_coder"
CALL_MARKERS = ("<tool_call>", "<function=")

# A name stops at `<` and at 256 characters: with `[^>\n]*`, every `<function=` on a long line
# without `>` scanned the rest of the line before failing (4,000 of them took 10 s, quadratic).
_FUNCTION = re.compile(r"<function=([^<>\n]{0,256})>(.*?)(?:</function>|\Z)", re.DOTALL)
_PARAM = re.compile(r"<parameter=([^<>\n]{0,256})>(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|\Z)", re.DOTALL)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")


def detect(template: str) -> bool:
    return "<function=" in template or "<parameter=" in template


# -- parsing -------------------------------------------------------------------------------------


def _strip_one_newline(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


class Qwen3CoderParser:
    dialect = NAME

    def __init__(self, tools: list[ToolSpec] | None = None) -> None:
        self.schemas = param_schemas(tools)

    def parse(self, text: str, reasoning_opened: bool = False) -> ParsedTurn:
        reasoning, rest = split_reasoning(text, reasoning_opened)
        start = _first_marker(rest)
        if start == -1:
            return ParsedTurn(content=rest.strip(), reasoning=reasoning)
        content = rest[:start].strip()
        turn = ParsedTurn(content=content, reasoning=reasoning)
        for block in _blocks(rest[start:], turn.errors):
            self._parse_block(block, turn)
        return turn

    def _parse_block(self, block: str, turn: ParsedTurn) -> None:
        functions = list(_FUNCTION.finditer(block))
        if not functions:
            turn.errors.append("a <tool_call> has no <function=NAME> inside it")
            return
        for match in functions:
            name = match.group(1).strip()
            if not _NAME.match(name):
                turn.errors.append(f"<function={name}> is not a valid tool name")
                continue
            if not match.group(0).endswith("</function>"):
                turn.errors.append(f"the call to {name} is not closed with </function>")
                continue
            arguments: dict[str, Any] = {}
            schemas = self.schemas.get(name, {})
            for param in _PARAM.finditer(match.group(2)):
                key = param.group(1).strip()
                if not key:
                    turn.errors.append(f"a <parameter=> of {name} has no name")
                    continue
                raw = _strip_one_newline(param.group(2))
                arguments[key] = coerce_value(raw, schemas.get(key))
            turn.tool_calls.append(ToolCall(id="", name=name, arguments=arguments))


def _first_marker(text: str) -> int:
    found = [i for i in (text.find("<tool_call>"), text.find("<function=")) if i != -1]
    return min(found) if found else -1


def _blocks(text: str, errors: list[str]) -> list[str]:
    """Split the call region into <tool_call> blocks; a bare <function=..> counts as one too."""
    blocks: list[str] = []
    pos = 0
    while pos < len(text):
        open_at = text.find("<tool_call>", pos)
        bare = text.find("<function=", pos)
        if open_at == -1 or (bare != -1 and bare < open_at):
            if bare == -1:
                break
            end = text.find("</function>", bare)
            stop = len(text) if end == -1 else end + len("</function>")
            blocks.append(text[bare:stop])
            pos = stop
            continue
        close = text.find("</tool_call>", open_at)
        if close == -1:
            block = text[open_at + len("<tool_call>") :]
            if "</function>" not in block:
                errors.append("a <tool_call> is not closed (no </function> or </tool_call>)")
                # keep parsing: the block may still hold a complete earlier function
            blocks.append(block)
            break
        blocks.append(text[open_at + len("<tool_call>") : close])
        pos = close + len("</tool_call>")
    return blocks


# -- the grammar ---------------------------------------------------------------------------------


def grammar(tools: list[ToolSpec], opens_reasoning: bool) -> ToolCallGrammar:
    rules = Rules()
    text = xml_text_rules(rules)
    functions = []
    for tool in tools:
        props = tool.parameters.get("properties", {})
        required = set(tool.parameters.get("required", []))
        parts = []
        for name, schema in props.items():
            param = rules.add(
                rule_name("p", tool.name, name),
                f'{literal(f"<parameter={name}>" + chr(10))} {xml_value_rule(schema, text)} {literal(chr(10) + "</parameter>" + chr(10))}',
            )
            parts.append(param if name in required else f"{param}?")
        body = " ".join(parts) if parts else '""'
        functions.append(
            rules.add(rule_name("fn", tool.name), f'{literal(f"<function={tool.name}>" + chr(10))} {body} "</function>"')
        )
    rules.add("fn", " | ".join(functions) or '"<function=>\\n</function>"')
    rules.add("block", '"<tool_call>\\n" fn "\\n</tool_call>" | fn')
    head = 'root ::= block ( ws block )* end-ws\n'
    return ToolCallGrammar(head + rules.text() + JSON_RULES, NAME)


TRIGGER = re.compile(rb"<tool_call>|<function=")


def tail_ok(matched: str, tail: str, names: list[str]) -> bool:
    if matched == "<tool_call>":
        options = [f"\n<function={n}>\n" for n in names]
    else:
        options = [f"{n}>\n" for n in names]
    return any(o.startswith(tail) for o in options)


DIALECT = ToolDialect(
    name=NAME, detect=detect, parser=Qwen3CoderParser, markers=StreamMarkers(calls=CALL_MARKERS),
    grammar=grammar, trigger=TRIGGER, tail_ok=tail_ok,
)
