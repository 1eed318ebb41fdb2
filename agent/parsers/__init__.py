"""Tool-call and reasoning parsers, one per dialect; the dialect comes from the chat template."""

from __future__ import annotations

from agent.parsers.base import ParsedTurn, ToolCallParser, split_reasoning
from agent.parsers.hermes import HermesParser
from agent.parsers.json_fallback import JsonFallbackParser
from agent.parsers.qwen3_coder import Qwen3CoderParser
from agent.parsers.stream import StreamSplitter
from models.chat import ToolSpec
from models.dialects.gemma4 import Gemma4Parser


def parser_for(dialect: str, tools: list[ToolSpec] | None = None) -> ToolCallParser:
    if dialect == "qwen3_coder":
        return Qwen3CoderParser(tools)
    if dialect == "hermes":
        return HermesParser(tools)
    if dialect == "gemma4":
        return Gemma4Parser(tools)
    return JsonFallbackParser(tools)


__all__ = ["ParsedTurn", "StreamSplitter", "ToolCallParser", "parser_for", "split_reasoning"]
