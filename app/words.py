"""Counts in words, as a person writes them: "1 step", "3 steps", never "1 steps" or "step(s)"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
