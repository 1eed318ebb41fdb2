"""Building blocks of the llama.cpp grammars (GBNF) for tool calls; each dialect builds its own from them.

A dialect's grammar is *lazy*: it waits until the model opens a tool call (the dialect's trigger
matches the text generated so far) and from there on only lets through a well-formed call with valid
tool names, argument names and value types — exactly the text that dialect's parser accepts
(models/dialects/). Free text and reasoning before the call stay unconstrained.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from models.chat import ToolSpec

# Substrings a Qwen3-Coder XML parameter value must not contain (the parser would cut it there).
XML_FORBIDDEN = ("</parameter>", "<parameter=", "</function>", "</tool_call>")
MAX_DIGITS = 15

JSON_RULES = r"""
ws ::= [ \t\n]{0,16}
end-ws ::= [ \t\n]{0,2}
json-string ::= "\"" json-char* "\""
json-char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])
json-int ::= "-"? [0-9]{1,15}
json-nat ::= [0-9]{1,15}
json-pos ::= [1-9] [0-9]{0,14}
json-number ::= "-"? [0-9]{1,15} ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?
json-bool ::= "true" | "false"
json-null ::= "null"
json-value ::= json-string | json-number | json-bool | json-null | json-object | json-array
json-object ::= "{" ws ( json-string ws ":" ws json-value ( ws "," ws json-string ws ":" ws json-value )* )? ws "}"
json-array ::= "[" ws ( json-value ( ws "," ws json-value )* )? ws "]"
"""


@dataclass(frozen=True)
class ToolCallGrammar:
    gbnf: str
    dialect: str


def literal(text: str) -> str:
    """A GBNF string literal."""
    return '"' + "".join(_LITERAL_ESCAPES.get(ch, ch) for ch in text) + '"'


_LITERAL_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _class_char(ch: str) -> str:
    if ch in "]\\^-[":
        return "\\" + ch
    if ch == "\n":
        return "\\n"
    return ch


def rule_name(*parts: str) -> str:
    return "-".join(re.sub(r"[^A-Za-z0-9]+", "-", p).strip("-") or "x" for p in parts).lower()


class Rules:
    def __init__(self) -> None:
        self.rules: dict[str, str] = {}

    def add(self, name: str, body: str) -> str:
        self.rules[name] = body
        return name

    def text(self) -> str:
        return "\n".join(f"{name} ::= {body}" for name, body in self.rules.items())


def schema_options(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """A schema's alternatives (anyOf / oneOf / a type list) as single-type schemas."""
    if "anyOf" in schema or "oneOf" in schema:
        out: list[dict[str, Any]] = []
        for option in schema.get("anyOf", []) + schema.get("oneOf", []):
            out += schema_options(option)
        return out
    kind = schema.get("type")
    if isinstance(kind, list):
        return [{**schema, "type": k} for k in kind]
    return [schema]


_JSON_RULES = {
    "number": "json-number", "boolean": "json-bool", "null": "json-null",
    "array": "json-array", "object": "json-object",
}


def json_value_rule(schema: dict[str, Any]) -> str:
    """A GBNF expression for one JSON value of `schema` (simple types; anything else is any JSON value)."""
    options = []
    for option in schema_options(schema):
        if "enum" in option:
            options += [literal(json.dumps(v, ensure_ascii=False)) for v in option["enum"]]
            continue
        kind = option.get("type")
        if kind == "string":
            options.append("json-string")
        elif kind == "integer":
            minimum = option.get("minimum")
            if isinstance(minimum, (int, float)) and minimum >= 1:
                options.append("json-pos")
            elif isinstance(minimum, (int, float)) and minimum >= 0:
                options.append("json-nat")
            else:
                options.append("json-int")
        else:
            options.append(_JSON_RULES.get(str(kind), "json-value"))
    unique = list(dict.fromkeys(options)) or ["json-value"]
    return unique[0] if len(unique) == 1 else "(" + " | ".join(unique) + ")"


def _object_rules(rules: Rules, prefix: str, parameters: dict[str, Any]) -> str:
    """`{...}` with the schema's properties in schema order, required ones mandatory."""
    props = list(parameters.get("properties", {}).items())
    required = set(parameters.get("required", []))
    n = len(props)
    kv = [
        rules.add(rule_name(prefix, "kv", name), f"{literal(json.dumps(name))} ws \":\" ws {json_value_rule(schema)}")
        for name, schema in props
    ]

    def after(i: int) -> str:
        return rule_name(prefix, "after", str(i))

    def first(i: int) -> str:
        return rule_name(prefix, "first", str(i))

    for i in range(n, -1, -1):
        if i == n:
            rules.add(after(i), '""')
            rules.add(first(i), '""')
            continue
        name = props[i][0]
        if name in required:
            rules.add(after(i), f'ws "," ws {kv[i]} {after(i + 1)}')
            rules.add(first(i), f"{kv[i]} {after(i + 1)}")
        else:
            rules.add(after(i), f'( ws "," ws {kv[i]} )? {after(i + 1)}')
            rules.add(first(i), f"{kv[i]} {after(i + 1)} | {first(i + 1)}")
    return rules.add(rule_name(prefix, "object"), f'"{{" ws {first(0)} ws "}}"')


def xml_text_rules(rules: Rules) -> str:
    """Any text that contains none of XML_FORBIDDEN: a small automaton over their prefixes."""
    prefixes = sorted({f[:i] for f in XML_FORBIDDEN for i in range(1, len(f))} | {""}, key=len)
    names = {p: rule_name("xml-text", str(i)) for i, p in enumerate(prefixes)}
    for prefix in prefixes:
        extensions = sorted({f[len(prefix)] for f in XML_FORBIDDEN if f.startswith(prefix) and len(f) > len(prefix)})
        options = []
        for ch in extensions:
            longer = prefix + ch
            if longer in XML_FORBIDDEN:
                continue  # completing a forbidden string is the one thing not allowed
            options.append(f"{literal(ch)} {names[longer]}")
        excluded = set(extensions) | {"<"}
        options.append("[^" + "".join(_class_char(c) for c in sorted(excluded)) + "] " + names[""])
        if "<" not in extensions:
            options.append(f'"<" {names["<"]}')
        options.append('""')
        rules.add(names[prefix], " | ".join(options))
    return names[""]


def xml_value_rule(schema: dict[str, Any], text_rule: str) -> str:
    options = []
    for option in schema_options(schema):
        kind = option.get("type")
        if "enum" in option:
            options += [literal(v if isinstance(v, str) else json.dumps(v)) for v in option["enum"]]
        elif kind == "integer":
            options.append(json_value_rule(option))
        elif kind == "number":
            options.append("json-number")
        elif kind == "boolean":
            options.append("json-bool")
        elif kind == "null":
            options.append("json-null")
        else:
            options.append(text_rule)
    if text_rule in options:
        return text_rule  # free text already admits every other spelling
    unique = list(dict.fromkeys(options)) or [text_rule]
    return unique[0] if len(unique) == 1 else "(" + " | ".join(unique) + ")"


def json_call_rules(tools: list[ToolSpec], name_keys: tuple[str, ...]) -> Rules:
    """`call`: a JSON object naming one of the tools under one of `name_keys`, with its `arguments`."""
    rules = Rules()
    calls = []
    for tool in tools:
        args = _object_rules(rules, rule_name("a", tool.name), tool.parameters)
        calls.append(
            rules.add(
                rule_name("c", tool.name),
                f'{literal(json.dumps(tool.name))} ws "," ws "\\"arguments\\"" ws ":" ws {args} ws "}}"',
            )
        )
    keys = " | ".join(literal(json.dumps(k)) for k in name_keys)
    rules.add("call", f'"{{" ws ( {keys} ) ws ":" ws ( {" | ".join(calls) or "json-string"} )')
    return rules
