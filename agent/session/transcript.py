"""`--transcript FILE`: the docs/contract.md JSON Lines events, flushed line by line."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from agent.core.events import AgentEvent, EventSink, transcript_record
from models.api_keys import redact


class TranscriptWriter:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # A lone surrogate (from a file name or recorded model output) is written as JSON's own
        # \uDXXX escape: every line stays valid JSON and reads back to the same string.
        self._file: IO[str] = path.open("w", encoding="utf-8", errors="backslashreplace")

    def __call__(self, event: AgentEvent) -> None:
        record = transcript_record(event)
        if record is not None and not self._file.closed:
            # An API key must not reach the file, even when a tool read it from the repository (.env).
            self._file.write(redact(json.dumps(record, ensure_ascii=False)) + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def fanout(sinks: Iterable[EventSink]) -> EventSink:
    targets = list(sinks)

    def emit(event: AgentEvent) -> None:
        for sink in targets:
            sink(event)

    return emit
