"""Gemma 4's tool-call dialect (`gemma4`): detection, parser, stream markers, grammar and how the stream goes on.

What Gemma 4's chat template (google-gemma-4-*-it.jinja) writes, and what the model writes back:

    <bos><|turn>system\\n{system}<|tool>declaration:Read{...}<tool|>...<turn|>\\n
    <|turn>user\\n{task}<turn|>\\n
    <|turn>model\\n<|channel>thought\\n<channel|>           the generation prompt (thinking off)
    <|channel>thought\\n{reasoning}<channel|>                the model thinking (`<|think|>` in the system turn)
    {text}<|tool_call>call:Read{file_path:<|"|>a.py<|"|>,limit:20}<tool_call|>
                                                           a call; the model then stops at <|tool_response>
    <|tool_response>response:Read{value:<|"|>{output}<|"|>}<tool_response|>
                                                           the result, and the model goes on in the same turn
                                                           until it answers and ends with <turn|>

Values: strings between `<|"|>` (no escapes: a string cannot hold `<|"|>`), numbers, true/false, null,
`{key:value,...}` with bare keys, `[a,b,...]`. The template writes a call's arguments sorted by name.

Like Qwen3.5's, the template rewrites history (it drops reasoning before the last user turn and the
empty thought channel of each generation prompt, and puts text after the calls): ribbit never
re-renders it. The token stream keeps what the model generated, then `after_turn()`: what the template
writes after the model's last token (the turn's close and the new messages), rendered after a stand-in.
Gemma 4's first templates, still inside many GGUFs, show tool results only as `tool_responses` on the
assistant message (`renders_tool_messages`); for them the messages are converted as llama.cpp does.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from models.chat import ChatMessage, ParsedTurn, ToolCall, ToolSpec
from models.dialects.base import StreamMarkers, ToolDialect
from models.grammar import JSON_RULES, Rules, ToolCallGrammar, json_value_rule, literal, rule_name, schema_options

NAME = "gemma4"
CALL_OPEN = "<|tool_call>"
CALL_PREFIX = CALL_OPEN + "call:"
CALL_CLOSE = "<tool_call|>"
RESPONSE_OPEN = "<|tool_response>"
QUOTE = '<|"|>'
THOUGHT_OPEN, THOUGHT_LABEL, THOUGHT_CLOSE = "<|channel>", "thought", "<channel|>"
TURN_CLOSE = "<turn|>"
# Arguments are flat; anything nested deeper is garbage (or an attack) and is refused, not recursed into.
MAX_DEPTH = 32
MAX_KEY = 64

# -- detection -----------------------------------------------------------------------------------


def detect(text: str) -> bool:
    """A chat template (or a model's raw output) in Gemma 4's tool-call format."""
    return CALL_PREFIX in text


# -- the stream ----------------------------------------------------------------------------------


def renders_tool_messages(render: Callable[[list[dict[str, Any]]], str]) -> bool:
    """Whether the template shows OpenAI-style `tool` messages as tool responses. Gemma 4's first
    templates (still inside many GGUFs) know only `tool_responses` on the assistant message."""
    probe = "RIBBIT_TOOL_PROBE_5e1d"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "S"}, {"role": "user", "content": "U"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "T", "arguments": {}}}]},
        {"role": "tool", "content": probe, "tool_call_id": "c", "name": "T"},
    ]
    try:
        text = render(messages)
    except Exception:  # noqa: BLE001 — a template that cannot render this renders no tool messages
        return False
    return RESPONSE_OPEN + "response:T{" in text and probe in text


def template_messages(messages: list[ChatMessage], legacy: bool) -> list[dict[str, Any]]:
    """The messages as the template expects them. For a legacy template, tool results move onto the
    assistant message whose calls they answer (`tool_responses`), and an answer that follows them joins
    that message, as llama.cpp does for such templates."""
    out = [m.to_template() for m in messages]
    if not legacy:
        return out
    merged: list[dict[str, Any]] = []
    i = 0
    while i < len(out):
        message = out[i]
        i += 1
        if message["role"] != "assistant" or not message.get("tool_calls"):
            merged.append(message)
            continue
        responses = []
        while i < len(out) and out[i]["role"] == "tool":
            result = out[i]
            calls = message["tool_calls"]
            name = next((c["function"]["name"] for c in calls if c.get("id") == result.get("tool_call_id")), result.get("name"))
            responses.append({"name": name or "unknown", "response": result["content"]})
            i += 1
        if responses:
            message = {**message, "tool_responses": responses}
            answer = out[i] if i < len(out) else None
            if answer and answer["role"] == "assistant" and not answer.get("tool_calls") and answer.get("content"):
                message["content"] = answer["content"]  # the answer goes on in the same model turn
                i += 1
        merged.append(message)
    return merged


def after_turn(
    render: Callable[[list[dict[str, Any]], bool], str], base: list[dict[str, Any]], turn: ChatMessage,
    new: list[ChatMessage], legacy: bool,
) -> str:
    """What follows the model's last token of `turn`: the new messages rendered after a stand-in of that
    turn, from where the model's part of it ends. Its close depends on the turn and on what follows: after
    calls the model stops at `<|tool_response>` and their results go on in the same turn; an answer ends
    with `<turn|>`. Tool results are rendered only by the turn whose calls they answer, so the stand-in
    carries those calls (and no text, which the template would write after them)."""
    stand_in = base[2]["content"]
    if turn.tool_calls:
        shape = turn.model_copy(update={"content": "", "reasoning_content": None})
    else:
        shape = ChatMessage(role="assistant", content=stand_in)
    before = render(base[:2] + template_messages([shape], legacy), False)
    marker = CALL_CLOSE if turn.tool_calls else stand_in
    at = before.rfind(marker)
    full = render(base[:2] + template_messages([shape, *new], legacy), True)
    end = at + len(marker)
    if at == -1 or not full.startswith(before[:end]):
        raise ValueError("rendering is not prefix-stable")
    return full[end:]


# -- parsing -------------------------------------------------------------------------------------

_MARKERS = re.compile(re.escape(THOUGHT_OPEN) + "|" + re.escape(THOUGHT_CLOSE) + "|" + re.escape(CALL_OPEN) + "|"
                      + re.escape(RESPONSE_OPEN))
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}")
_KEY = re.compile(r"[^:{}\[\],<>\"]+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WORDS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
_WORD = re.compile(r"[A-Za-z]+")
_SPACE = re.compile(r"[ \t\r\n]*")


class Malformed(ValueError):
    """What is wrong with a call, in words for the model."""


def _snippet(text: str, at: int) -> str:
    piece = text[at : at + 24]
    return repr(piece + ("…" if len(text) > at + 24 else "")) if piece else "the end of the turn"


class _Reader:
    """A Gemma 4 value at a position of the text; iterative over siblings, recursive only per level (capped)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def space(self, at: int) -> int:
        match = _SPACE.match(self.text, at)
        return match.end() if match else at

    def value(self, at: int, depth: int) -> tuple[Any, int]:
        text = self.text
        at = self.space(at)
        if text.startswith(QUOTE, at):
            end = text.find(QUOTE, at + len(QUOTE))
            if end == -1:
                raise Malformed(f"a {QUOTE} string is not closed with {QUOTE}")
            return text[at + len(QUOTE) : end], end + len(QUOTE)
        if text.startswith("{", at):
            return self.mapping(at, depth + 1)
        if text.startswith("[", at):
            return self.sequence(at, depth + 1)
        number = _NUMBER.match(text, at)
        if number:
            raw = number.group(0)
            try:
                parsed: Any = float(raw) if any(c in raw for c in ".eE") else int(raw)
            except ValueError:
                raise Malformed(f"the number {raw[:24]!r} is too long") from None
            if isinstance(parsed, float) and not math.isfinite(parsed):
                raise Malformed(f"the number {raw[:24]!r} is out of range")
            return parsed, number.end()
        word = _WORD.match(text, at)
        if word and word.group(0) in _WORDS:
            return _WORDS[word.group(0)], word.end()
        raise Malformed(
            f"a value must be a {QUOTE}-quoted string, a number, true, false, null, {{...}} or [...]; "
            f"found {_snippet(text, at)}"
        )

    def mapping(self, at: int, depth: int) -> tuple[dict[str, Any], int]:
        if depth > MAX_DEPTH:
            raise Malformed(f"the arguments nest more than {MAX_DEPTH} levels deep")
        text = self.text
        out: dict[str, Any] = {}
        at = self.space(at + 1)
        if text.startswith("}", at):
            return out, at + 1
        while True:
            key, at = self.key(at)
            if key in out:
                raise Malformed(f"the argument {key!r} is given twice")
            at = self.space(at)
            if not text.startswith(":", at):
                raise Malformed(f"expected ':' after {key!r}; found {_snippet(text, at)}")
            out[key], at = self.value(at + 1, depth)
            at = self.space(at)
            if text.startswith(",", at):
                at = self.space(at + 1)
                continue
            if text.startswith("}", at):
                return out, at + 1
            raise Malformed(f"expected ',' or '}}' after the value of {key!r}; found {_snippet(text, at)}")

    def key(self, at: int) -> tuple[str, int]:
        text = self.text
        if text.startswith(QUOTE, at):
            end = text.find(QUOTE, at + len(QUOTE))
            if end == -1:
                raise Malformed(f"a {QUOTE} string is not closed with {QUOTE}")
            key, at = text[at + len(QUOTE) : end], end + len(QUOTE)
        else:
            match = _KEY.match(text, at)
            key, at = (match.group(0).strip(), match.end()) if match else ("", at)
        if not key or len(key) > MAX_KEY:
            raise Malformed(f"expected an argument name; found {_snippet(text, at)}")
        return key, at

    def sequence(self, at: int, depth: int) -> tuple[list[Any], int]:
        if depth > MAX_DEPTH:
            raise Malformed(f"the arguments nest more than {MAX_DEPTH} levels deep")
        text = self.text
        out: list[Any] = []
        at = self.space(at + 1)
        if text.startswith("]", at):
            return out, at + 1
        while True:
            item, at = self.value(at, depth)
            out.append(item)
            at = self.space(at)
            if text.startswith(",", at):
                at += 1
                continue
            if text.startswith("]", at):
                return out, at + 1
            raise Malformed(f"expected ',' or ']' in a list; found {_snippet(text, at)}")


def read_call(text: str, at: int) -> tuple[ToolCall, int]:
    """The call that opens at `at` (at `<|tool_call>`) and where it ends (after `<tool_call|>`)."""
    start = at + len(CALL_OPEN)
    if not text.startswith("call:", start):
        raise Malformed(f"{CALL_OPEN} must be followed by call:NAME{{...}}; found {_snippet(text, start)}")
    name_match = _NAME.match(text, start + len("call:"))
    if not name_match:
        raise Malformed(f"a call has no valid tool name; found {_snippet(text, start + len('call:'))}")
    name = name_match.group(0)
    at = name_match.end()
    if text.find(CALL_CLOSE, at) == -1:
        raise Malformed(f"the call to {name} is not closed with {CALL_CLOSE} (the turn ends inside it)")
    if not text.startswith("{", at):
        raise Malformed(f"the call to {name} must go on with {{ and its arguments; found {_snippet(text, at)}")
    try:
        arguments, at = _Reader(text).mapping(at, 1)
    except Malformed as exc:
        raise Malformed(f"the call to {name}: {exc}") from None
    at = _Reader(text).space(at)
    if not text.startswith(CALL_CLOSE, at):
        raise Malformed(f"the call to {name} is not closed with {CALL_CLOSE}; found {_snippet(text, at)}")
    return ToolCall(id="", name=name, arguments=arguments), at + len(CALL_CLOSE)


def _thought(body: str) -> str:
    """A thought channel's text without its `thought` label line."""
    if body.startswith(THOUGHT_LABEL) and body[len(THOUGHT_LABEL) : len(THOUGHT_LABEL) + 1] in ("", "\n", " ", "\r", "\t"):
        body = body[len(THOUGHT_LABEL) :]
    return body.strip()


class Gemma4Parser:
    """Thought channels become reasoning, text before the first call the content, each
    `<|tool_call>call:NAME{...}<tool_call|>` a call; whatever follows `<|tool_response>` is not the model's."""

    dialect = NAME

    def __init__(self, tools: list[ToolSpec] | None = None) -> None:
        self.tools = tools

    def parse(self, text: str, reasoning_opened: bool = False) -> ParsedTurn:
        reasoning: list[str] = []
        content: list[str] = []
        turn = ParsedTurn(content="")
        at = 0
        if reasoning_opened:
            at = self._thought_at(text, 0, reasoning)
        while at < len(text):
            marker = _MARKERS.search(text, at)
            if marker is None:
                if not turn.tool_calls and not turn.errors:
                    content.append(text[at:])
                break
            if not turn.tool_calls and not turn.errors:
                content.append(text[at : marker.start()])
            found = marker.group(0)
            if found == RESPONSE_OPEN:
                break  # the model stops here; what follows would be made-up tool results
            if found == THOUGHT_OPEN:
                at = self._thought_at(text, marker.end(), reasoning)
            elif found == THOUGHT_CLOSE:
                at = marker.end()  # a stray close (the generation prompt already closed the channel)
            else:
                at = self._call_at(text, marker.start(), turn)
        turn.content = "".join(content).strip()
        said = [r for r in reasoning if r]
        turn.reasoning = "\n\n".join(said) if said else None
        return turn

    @staticmethod
    def _thought_at(text: str, at: int, reasoning: list[str]) -> int:
        end = text.find(THOUGHT_CLOSE, at)
        stop = len(text) if end == -1 else end  # cut off mid-thought: all of it is reasoning
        reasoning.append(_thought(text[at:stop]))
        return stop if end == -1 else end + len(THOUGHT_CLOSE)

    @staticmethod
    def _call_at(text: str, at: int, turn: ParsedTurn) -> int:
        try:
            call, end = read_call(text, at)
        except Malformed as exc:
            turn.errors.append(str(exc))
            # Go on after this call's close, if there is one, so later calls still count.
            close = text.find(CALL_CLOSE, at)
            return len(text) if close == -1 else close + len(CALL_CLOSE)
        turn.tool_calls.append(call)
        return end


# -- the grammar ---------------------------------------------------------------------------------

# Text that does not contain `<|"|>`: states = how much of it the text ends with (it has no border,
# so a string may end in any state and the closing quote still ends it).
_TEXT_RULES = r"""
g-text-0 ::= [^<] g-text-0 | "<" g-text-1 | ""
g-text-1 ::= [^<|] g-text-0 | "<" g-text-1 | "|" g-text-2 | ""
g-text-2 ::= [^<"] g-text-0 | "<" g-text-1 | "\"" g-text-3 | ""
g-text-3 ::= [^<|] g-text-0 | "<" g-text-1 | "|" g-text-4 | ""
g-text-4 ::= [^<>] g-text-0 | "<" g-text-1 | ""
g-string ::= "<|\"|>" g-text-0 "<|\"|>"
g-key ::= [A-Za-z_] [A-Za-z0-9_]{0,63}
g-value ::= g-string | json-number | json-bool | json-null | g-dict | g-array
g-dict ::= "{" ( g-key ":" g-value ( "," g-key ":" g-value )* )? "}"
g-array ::= "[" ( g-value ( "," g-value )* )? "]"
"""


def _value_rule(schema: dict[str, Any]) -> str:
    options = []
    for option in schema_options(schema):
        kind = option.get("type")
        if "enum" in option:
            options += [literal(QUOTE + v + QUOTE if isinstance(v, str) else json.dumps(v)) for v in option["enum"]]
        elif kind == "string":
            options.append("g-string")
        elif kind in ("integer", "number", "boolean", "null"):
            options.append(json_value_rule(option))
        else:
            options.append("g-value")
    unique = list(dict.fromkeys(options)) or ["g-value"]
    return unique[0] if len(unique) == 1 else "(" + " | ".join(unique) + ")"


def _arguments_rule(rules: Rules, tool: ToolSpec) -> str:
    """`name:value` pairs in name order (as the template writes them), the required ones mandatory."""
    props = sorted(tool.parameters.get("properties", {}).items())
    required = set(tool.parameters.get("required", []))
    pairs = [rules.add(rule_name("g", tool.name, "kv", name), f"{literal(name + ':')} {_value_rule(schema)}")
             for name, schema in props]
    prefix = rule_name("g", tool.name)
    for i in range(len(props), -1, -1):
        after, first = f"{prefix}-after-{i}", f"{prefix}-first-{i}"
        if i == len(props):
            rules.add(after, '""')
            rules.add(first, '""')
        elif props[i][0] in required:
            rules.add(after, f'"," {pairs[i]} {prefix}-after-{i + 1}')
            rules.add(first, f"{pairs[i]} {prefix}-after-{i + 1}")
        else:
            rules.add(after, f'( "," {pairs[i]} )? {prefix}-after-{i + 1}')
            rules.add(first, f"{pairs[i]} {prefix}-after-{i + 1} | {prefix}-first-{i + 1}")
    return rules.add(rule_name("g-fn", tool.name), f'{literal(tool.name + "{")} {prefix}-first-0 "}}"')


def grammar(tools: list[ToolSpec], opens_reasoning: bool) -> ToolCallGrammar:
    """One or more calls with valid tool names, argument names and value types, and nothing after them."""
    rules = Rules()
    functions = [_arguments_rule(rules, tool) for tool in tools]
    head = f"root ::= g-call+\ng-call ::= {literal(CALL_PREFIX)} g-fn {literal(CALL_CLOSE)}\n"
    head += f"g-fn ::= {' | '.join(functions)}\n"
    return ToolCallGrammar(head + rules.text() + _TEXT_RULES + JSON_RULES, NAME)


class CallTrigger:
    """Finds where a call opens in generated bytes, outside thought channels (a call written while
    thinking is reasoning, not a call). Has `search()` like the compiled patterns of other dialects."""

    _open = re.compile(re.escape(CALL_OPEN.encode()))

    def search(self, buffer: bytes | bytearray, pos: int = 0) -> re.Match[bytes] | None:
        for match in self._open.finditer(buffer, pos):
            opened = buffer.rfind(THOUGHT_OPEN.encode(), 0, match.start())
            if opened == -1 or buffer.rfind(THOUGHT_CLOSE.encode(), opened, match.start()) != -1:
                return match
        return None


def tail_ok(matched: str, tail: str, names: list[str]) -> bool:
    """Whether what followed the call opening inside its token can start a call the grammar accepts."""
    return any(f"call:{name}{{".startswith(tail) for name in names)


DIALECT = ToolDialect(
    name=NAME, detect=detect, parser=Gemma4Parser,
    markers=StreamMarkers(
        calls=(CALL_OPEN,), reasoning_open=THOUGHT_OPEN + THOUGHT_LABEL, reasoning_close=THOUGHT_CLOSE,
        reasoning_again=True, hidden=(THOUGHT_CLOSE,),
    ),
    grammar=grammar, trigger=CallTrigger(), tail_ok=tail_ok,
)
