"""How many tokens one tool result may take: sized by what reading it costs on this machine.

On a 2-core laptop FrogNano reads ~30 prompt tokens a second, so a 2,000-line Read (~25K tokens) costs
a quarter of an hour before the model says a word. A result is therefore capped to the tokens the model
reads in SECONDS_PER_RESULT at its measured prompt speed (ModelInfo.prompt_tokens_per_s), within
FLOOR_TOKENS and CEILING_TOKENS and never more than a quarter of the context; `--tool-output-tokens N`
sets it instead. The contract's limits (Read's 2,000 lines, Bash's 30,000 characters) stay the maxima.

Tokens are counted with the model's own tokenizer where the backend has one (`count_tokens`), chars/4
otherwise; and only as much text as the budget keeps is ever counted (line by line, from the end that
is kept), so a megabyte of output costs no more to size than the result it becomes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from models.base import estimate_tokens

SECONDS_PER_RESULT = 60.0
FLOOR_TOKENS = 1_000
CEILING_TOKENS = 12_000
# A context this small could not hold even the floor a few times over: a quarter of it, at least this.
MIN_TOKENS = 256


@dataclass
class OutputBudget:
    """The token budget of one tool result (None: no budget beyond the contract's limits) and how
    tokens are counted."""

    tokens: int | None = None
    count: Callable[[str], int] = field(default=estimate_tokens)
    reason: str = "no budget"

    def fits(self, text: str) -> bool:
        if self.tokens is None or len(text.encode("utf-8", "surrogatepass")) <= self.tokens:
            return True  # a token is at least one byte: no need to count
        return self.counted(text, self.tokens) <= self.tokens

    def counted(self, text: str, stop_after: int) -> int:
        """Tokens of `text`, counted line by line until more than `stop_after` are seen."""
        total = 0
        for line in text.splitlines(keepends=True):
            total += self.count(line)
            if total > stop_after:
                break
        return total

    def head(self, lines: list[str], tokens: int, chars: int | None = None, min_lines: int = 0) -> int:
        """How many of `lines` (from the first) fit in `tokens` (and `chars`); at least `min_lines`."""
        return _fit(lines, tokens, chars, self.count, min_lines)

    def tail(self, lines: list[str], tokens: int, chars: int | None = None) -> int:
        """How many of `lines` (from the last, backwards) fit in `tokens` (and `chars`)."""
        return _fit(lines[::-1], tokens, chars, self.count, 0)


def _fit(lines: list[str], tokens: int, chars: int | None, count: Callable[[str], int], min_lines: int) -> int:
    used_tokens = used_chars = 0
    for n, line in enumerate(lines):
        used_chars += len(line) + 1
        if chars is not None and used_chars > chars and n >= min_lines:
            return n
        used_tokens += count(line + "\n")
        if used_tokens > tokens and n >= min_lines:
            return n
    return len(lines)


def model_token_counter(model: Any) -> Callable[[str], int]:
    """The backend's tokenizer where it has one (`count_tokens`), chars/4 otherwise."""
    counter = getattr(model, "count_tokens", None)
    return counter if callable(counter) else estimate_tokens


def budget_for(
    prompt_tokens_per_s: float | None, context: int, override: int | None = None,
    count: Callable[[str], int] = estimate_tokens,
) -> OutputBudget:
    """The budget for the next tool result, from the model's measured prompt speed (or `override`)."""
    if override is not None:
        return OutputBudget(tokens=override, count=count, reason=f"{override} tokens (--tool-output-tokens)")
    cap = max(MIN_TOKENS, context // 4)
    if prompt_tokens_per_s is None or prompt_tokens_per_s <= 0:
        # Not measured yet (the system prompt came from disk) or not in-process (a server, a replay).
        tokens = min(CEILING_TOKENS, cap)
        return OutputBudget(tokens=tokens, count=count, reason=f"{tokens} tokens (prompt speed not measured yet)")
    wanted = prompt_tokens_per_s * SECONDS_PER_RESULT
    tokens = min(cap, max(FLOOR_TOKENS, min(CEILING_TOKENS, int(wanted))))
    return OutputBudget(
        tokens=tokens, count=count,
        reason=f"{tokens} tokens (~{tokens / prompt_tokens_per_s:.0f} s to read at {prompt_tokens_per_s:.0f} tokens/s)",
    )
