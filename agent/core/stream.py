"""Splits streamed model text into reasoning and visible text for live display, by the dialect's markers.

Tool-call markup is held back (the call is shown as a card once parsed). Partial tags at a chunk
boundary are buffered so `</thi` + `nk>` never leaks into the text.
"""

from __future__ import annotations

from collections.abc import Callable

from models.dialects import StreamMarkers, dialect_named


class StreamSplitter:
    def __init__(
        self,
        on_text: Callable[[str], None],
        on_reasoning: Callable[[str], None],
        reasoning_opened: bool = False,
        markers: StreamMarkers | None = None,
    ) -> None:
        self.on_text = on_text
        self.on_reasoning = on_reasoning
        self.state = "reasoning" if reasoning_opened else "start"
        self.markers = markers or dialect_named("qwen3_coder").markers
        self.buffer = ""
        self._after_think = False
        self._reasoning_start = reasoning_opened and self.markers.reasoning_again

    @classmethod
    def for_dialect(
        cls, dialect: str, on_text: Callable[[str], None], on_reasoning: Callable[[str], None], reasoning_opened: bool = False
    ) -> StreamSplitter:
        return cls(on_text, on_reasoning, reasoning_opened, dialect_named(dialect).markers)

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
        opening = self.markers.reasoning_open
        if self.state == "start":
            stripped = self.buffer.lstrip()
            if not stripped:
                return False
            if stripped.startswith(opening):
                self.buffer = stripped[len(opening) :]
                self._enter("reasoning")
                return True
            if opening.startswith(stripped):
                return False  # could still become the opening
            self.state = "text"
            return True
        if self.state == "reasoning":
            if self._reasoning_start:  # the label line's end (Gemma 4)
                self.buffer = self.buffer.lstrip()
                if not self.buffer:
                    return False
                self._reasoning_start = False
            return self._until({self.markers.reasoning_close: "text"}, self.on_reasoning)
        if self._after_think:
            self.buffer = self.buffer.lstrip("\n")
            if not self.buffer:
                return False
            self._after_think = False
        targets = {marker: "call" for marker in self.markers.calls}
        targets.update({marker: "text" for marker in self.markers.hidden})
        if self.markers.reasoning_again:
            targets[opening] = "reasoning"
        return self._until(targets, self.on_text)

    def _enter(self, state: str) -> None:
        self.state = state
        self._reasoning_start = state == "reasoning" and self.markers.reasoning_again
        self._after_think = False

    def _until(self, targets: dict[str, str], emit: Callable[[str], None]) -> bool:
        hits = [(self.buffer.find(m), m) for m in targets if m in self.buffer]
        if hits:
            at, marker = min(hits)
            if at:
                emit(self.buffer[:at])
            next_state = targets[marker]
            self.buffer = self.buffer[at + len(marker) :] if next_state != "call" else ""
            leaving_reasoning = self.state == "reasoning"
            self._enter(next_state)
            self._after_think = leaving_reasoning
            return True
        keep = _partial_suffix(self.buffer, tuple(targets))
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
