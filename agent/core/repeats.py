"""Spotting a model that goes round in circles: the same call again and again, or a short cycle of calls.

A small model stuck on a problem repeats itself: `Read a.py` three times, or `Read a.py`, `Bash pytest`,
`Read a.py`, `Bash pytest`. Nothing changed in between, so neither will the results; the loop appends a
warning to the result that completes the pattern, and the model can take another way or finish.
"""

from __future__ import annotations

import json

from models.chat import ToolCall

IDENTICAL_AT = 3  # the same call this many times in a row
CYCLE_ROUNDS = 2  # a cycle of 2 or 3 different calls, gone through this many times in a row
MAX_CYCLE = 3


def call_signature(call: ToolCall) -> str:
    return call.name + json.dumps(call.arguments, sort_keys=True, default=str)


def short_call(call: ToolCall, limit: int = 60) -> str:
    """`Read(calc.py)`: the call as the warning names it."""
    first = next(iter(call.arguments.values()), "") if call.arguments else ""
    text = str(first).replace("\n", " ")
    return f"{call.name}({text[: limit - 1] + '…' if len(text) > limit else text})"


class RepeatDetector:
    def __init__(self) -> None:
        self._history: list[tuple[str, ToolCall]] = []

    def warning(self, call: ToolCall) -> str:
        """Record `call`; the text to append to its result ('' when it completes no pattern)."""
        self._history.append((call_signature(call), call))
        self._history = self._history[-max(IDENTICAL_AT, MAX_CYCLE * CYCLE_ROUNDS) :]
        signatures = [s for s, _ in self._history]
        recent = signatures[-IDENTICAL_AT:]
        if len(recent) == IDENTICAL_AT and len(set(recent)) == 1:
            return (
                f"\n\nWarning: this is the same {call.name} call {IDENTICAL_AT} times in a row. "
                "Its result will not change; try something different or finish."
            )
        for period in range(2, MAX_CYCLE + 1):
            span = period * CYCLE_ROUNDS
            tail = signatures[-span:]
            if len(tail) < span or len(set(tail[:period])) != period:
                continue
            if all(tail[i] == tail[i % period] for i in range(span)):
                names = ", ".join(short_call(c) for _, c in self._history[-period:])
                return (
                    f"\n\nWarning: your last {span} calls went round the same {period} calls {CYCLE_ROUNDS} times "
                    f"({names}). Their results will not change; try something different or finish."
                )
        return ""
