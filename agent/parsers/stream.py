"""Splits streamed model text into reasoning and visible text for live display.

Tool-call markup is held back (the call is shown as a card once parsed). Partial tags at a chunk
boundary are buffered so `</thi` + `nk>` never leaks into the text.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.parsers.base import THINK_CLOSE, THINK_OPEN

CALL_MARKERS = ("<tool_call>", "<function=")


class StreamSplitter:
    def __init__(
        self,
        on_text: Callable[[str], None],
        on_reasoning: Callable[[str], None],
        reasoning_opened: bool = False,
        call_markers: tuple[str, ...] = CALL_MARKERS,
    ) -> None:
        self.on_text = on_text
        self.on_reasoning = on_reasoning
        self.state = "reasoning" if reasoning_opened else "start"
        self.markers = call_markers
        self.buffer = ""
        self._after_think = False

    def feed(self, chunk: str) -> None:
        if self.state == "call":
            return  # the call is shown once parsed; keeping its text would only grow the buffer
        self.buffer += chunk
        while self.buffer and self.state != "call":
            if not self._advance():
                break

    def flush(self) -> None:
        if self.state == "reasoning" and self.buffer:
            self.on_reasoning(self.buffer)
        elif self.state in ("text", "start") and self.buffer:
            self.on_text(self.buffer)
        self.buffer = ""

    def _advance(self) -> bool:
        """Emit what is safe; return True if the state changed and there may be more to do."""
        if self.state == "start":
            stripped = self.buffer.lstrip()
            if not stripped:
                return False
            if stripped.startswith(THINK_OPEN):
                self.buffer = stripped[len(THINK_OPEN) :]
                self.state = "reasoning"
                return True
            if THINK_OPEN.startswith(stripped):
                return False  # could still become <think>
            self.state = "text"
            return True
        if self.state == "reasoning":
            return self._until((THINK_CLOSE,), self.on_reasoning, "text")
        if self._after_think:
            self.buffer = self.buffer.lstrip("\n")
            if not self.buffer:
                return False
            self._after_think = False
        return self._until(self.markers, self.on_text, "call")

    def _until(self, markers: tuple[str, ...], emit: Callable[[str], None], next_state: str) -> bool:
        hits = [(self.buffer.find(m), m) for m in markers if m in self.buffer]
        if hits:
            at, marker = min(hits)
            if at:
                emit(self.buffer[:at])
            self.buffer = self.buffer[at + len(marker) :] if next_state == "text" else ""
            self.state = next_state
            self._after_think = next_state == "text"
            return True
        keep = _partial_suffix(self.buffer, markers)
        safe = self.buffer[: len(self.buffer) - keep]
        if safe:
            emit(safe)
        self.buffer = self.buffer[len(safe) :]
        return False


def _partial_suffix(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest tail of `text` that is a proper prefix of some marker."""
    best = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), 0, -1):
            if text.endswith(marker[:size]):
                best = max(best, size)
                break
    return best
