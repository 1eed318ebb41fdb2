"""Tool-call dialects, one module each (detection, parser, stream markers, grammar, trigger), and the
registry that picks one from a chat template. Adding a dialect: one module and one line in DIALECTS."""

from __future__ import annotations

from models.chat import ToolSpec
from models.dialects import gemma4, hermes, json_fallback, qwen3_coder
from models.dialects.base import StreamMarkers, ToolCallParser, ToolDialect
from models.grammar import ToolCallGrammar

# In detection order: the first whose detect() accepts the template wins; json (accepts any) is last.
DIALECTS: tuple[ToolDialect, ...] = (
    gemma4.DIALECT,
    qwen3_coder.DIALECT,
    hermes.DIALECT,
    json_fallback.DIALECT,
)
FALLBACK = json_fallback.DIALECT
# Backends that parse calls themselves (OpenAI-compatible servers) say so with this name.
NATIVE = "native"
_BY_NAME = {d.name: d for d in DIALECTS}


def detect_dialect(template: str) -> str:
    """How a model writes tool calls, judged by what its template teaches it."""
    return next(d.name for d in DIALECTS if d.detect(template))


def dialect_named(name: str) -> ToolDialect:
    """The dialect called `name`; the fallback for `native` and anything unknown (it never parses there)."""
    return _BY_NAME.get(name, FALLBACK)


def parser_for(name: str, tools: list[ToolSpec] | None = None) -> ToolCallParser:
    return dialect_named(name).parser(tools)


def tool_call_grammar(name: str, tools: list[ToolSpec], opens_reasoning: bool = False) -> ToolCallGrammar | None:
    """The grammar for dialect `name`, or None where there is none to build (no tools, native calls)."""
    if not tools or name not in _BY_NAME:
        return None
    return _BY_NAME[name].grammar(tools, opens_reasoning)


__all__ = [
    "DIALECTS", "FALLBACK", "NATIVE", "StreamMarkers", "ToolCallParser", "ToolDialect",
    "detect_dialect", "dialect_named", "parser_for", "tool_call_grammar",
]
