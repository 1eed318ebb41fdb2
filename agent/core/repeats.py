"""Spotting a model that goes round in circles: the same call again and again, or a short cycle of calls.

A small model stuck on a problem repeats itself: `Read a.py` three times, or `Read a.py`, `Bash pytest`,
`Read a.py`, `Bash pytest`. Nothing changed in between, so neither will the results; the loop appends a
warning to the result that completes the pattern, and the model can take another way or finish.
"""

from __future__ import annotations

import json
import re

from pydantic import BaseModel

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


# -- a model that repeats itself within one turn ------------------------------------------------------
#
# A small model can fall into a loop inside a single answer: one sentence, or a block of lines, written
# again and again until the turn's token cap (8,192 tokens: minutes on a laptop). RepetitionGuard watches
# the stream and says when the text has ended in the same run of words repeated past a threshold; the loop
# then ends the turn and tells the model. Code legitimately repeats short lines (closing brackets, `0, 0,`,
# blank lines, similar test cases), so the threshold asks for both many copies and a long repeated span:
# bench/repetition.py measures it on real files (no cut) and on recorded loops (how soon each is cut).

# Words, single newlines, and runs of one punctuation character ("=====" is one); other white space is not
# counted, so a loop that only changes indentation or spacing is still the same loop.
_STREAM_TOKENS = re.compile(r"\w+|\n|([^\w\s])\1*")
REPEAT_MAX_PERIOD = 400  # the longest unit (in stream tokens) recognised as repeating
REPEAT_MIN_COPIES = 8  # copies of the unit, the first included (5 of a long row: the stdlib's email tests) ...
REPEAT_MIN_SPAN = 320  # ... and stream tokens the copies after the first must cover
SHORT_PERIOD = 8  # a unit this short (`None,` rows of a data table) must repeat over SHORT_SPAN tokens
SHORT_SPAN = 4 * REPEAT_MIN_SPAN
LONG_WORD = 48  # a "word" longer than this (`add_test_calc_add_test_calc...`) is read character by character


class Repetition(BaseModel):
    """What RepetitionGuard found: the unit that repeats, how many times, and where the repeats start."""

    unit: str  # the repeated text, as first written
    copies: int
    keep_chars: int  # characters of the raw stream up to the end of the unit's first copy (see at_raw)


class RepetitionGuard:
    """Feed it the text of one turn as it streams; `found` is set once the text ends in a loop."""

    def __init__(self, max_period: int = REPEAT_MAX_PERIOD, min_copies: int = REPEAT_MIN_COPIES,
                 min_span: int = REPEAT_MIN_SPAN) -> None:
        self.max_period, self.min_copies, self.min_span = max_period, min_copies, min_span
        self.longest = (0, 0)  # the longest run seen so far, and its period (bench/repetition.py reports it)
        self.text = ""
        self._scanned = 0  # characters of `text` already split into tokens (the rest may be a partial word)
        self._tokens: list[str] = []
        self._ends: list[int] = []  # each token's end offset in `text`
        self._seen: dict[str, list[int]] = {}  # token -> its recent positions
        self._runs: dict[int, tuple[int, int]] = {}  # period -> (run length, position it was last extended at)
        self.found: Repetition | None = None
        self._raw = 0  # characters of the raw stream so far (at_raw), when the guard is fed part of it
        self._marks: list[tuple[int, int]] = []  # (len(text), raw length) after each feed

    def at_raw(self, length: int) -> None:
        """The raw stream (tool calls included) is `length` characters now: what is fed next is prose from it."""
        self._raw = length

    def raw_offset(self, offset: int) -> int:
        """Where an offset in the text fed lies in the raw stream (the same offset without at_raw)."""
        for fed, raw in self._marks:
            if fed >= offset and raw:
                return max(0, raw - (fed - offset))
        return offset

    def feed(self, chunk: str) -> Repetition | None:
        if self.found is not None or not chunk:
            return self.found
        self.text += chunk
        self._marks.append((len(self.text), self._raw))
        # A word may go on in the next chunk: only what is followed by something else is a whole token.
        for match in _STREAM_TOKENS.finditer(self.text, self._scanned):
            token = match.group()
            if len(token) > LONG_WORD and (token[0].isalnum() or token[0] == "_"):
                # A word that does not end: its characters are the tokens (a loop inside one identifier).
                for offset in range(match.start(), match.end()):
                    self._scanned = offset + 1
                    if self._add(self.text[offset], offset + 1):
                        return self.found
                continue
            if match.end() == len(self.text) and not token.isspace():
                break
            self._scanned = match.end()
            if self._add(token, match.end()):
                break
        return self.found

    def _add(self, token: str, end: int) -> bool:
        i = len(self._tokens)
        self._tokens.append(token)
        self._ends.append(end)
        positions = self._seen.setdefault(token, [])
        low = i - self.max_period
        while positions and positions[0] < low:
            positions.pop(0)
        runs = self._runs
        best: tuple[int, int] | None = None  # (run, period)
        for j in positions:
            period = i - j
            run, last = runs.get(period, (0, -2))
            run = run + 1 if last == i - 1 else 1
            runs[period] = (run, i)
            if run > self.longest[0] and run + period >= self.min_copies * period:
                self.longest = (run, period)
            if self._is_loop(run, period) and (best is None or period < best[1]):
                best = (run, period)
        positions.append(i)
        if len(runs) > 4 * self.max_period:  # forget the periods that stopped repeating
            self._runs = {p: v for p, v in runs.items() if v[1] == i}
        if best is None:
            return False
        run, period = best
        start = i - run - period + 1  # the first token of the first copy
        if _primitive(self._tokens[start:start + period]) < SHORT_PERIOD and run < SHORT_SPAN:
            return False  # 60 Ms are 60 copies of M: a short unit, judged as one (idna's data tables)
        first_end = self._ends[start + period - 1]
        first_start = self._ends[start - 1] if start > 0 else 0
        self.found = Repetition(unit=self.text[first_start:first_end].strip(), copies=(run + period) // period,
                                keep_chars=self.raw_offset(first_end))
        return True

    def _is_loop(self, run: int, period: int) -> bool:
        """`run` tokens after the first copy of a `period`-token unit have repeated it exactly."""
        span = self.min_span if period >= SHORT_PERIOD else max(self.min_span, SHORT_SPAN)
        return run >= span and run + period >= self.min_copies * period


def _primitive(unit: list[str]) -> int:
    """The shortest period of `unit` (len(unit) when it is not a repeat of a shorter one)."""
    size = len(unit)
    for period in range(1, size // 2 + 1):
        if size % period == 0 and unit[period:] == unit[:-period]:
            return period
    return size
