"""Argument parsing shared by every `ribbit` command: errors as exceptions, so each command's main
decides the exit code (2) and prints one line; value types with messages a user can act on."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from models.backends import EngineOptions


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so main() controls the exit code (2) and message."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: error: {message}")


def _number(text: str, kind: type[int] | type[float], ok: Callable[[float], bool], why: str) -> float:
    """`text` as a number of `kind` that is `ok`, or an argparse error that says what was wanted."""
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'a whole number' if kind is int else 'a number'}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r} {why}")
    return value


def positive(text: str) -> int:
    return int(_number(text, int, lambda v: v > 0, "must be positive"))


def positive_float(text: str) -> float:
    return _number(text, float, lambda v: v > 0, "must be positive")


def temperature(text: str) -> float:
    return _number(text, float, lambda v: 0.0 <= v <= 5.0, "must be between 0 and 5")


def on_off(text: str) -> bool:
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"{text!r} is not on or off")
    return text == "on"


# The TUI has no screen for review mode's end-of-run review yet: said by its parser and by the app alike.
TUI_NO_REVIEW = "review mode is not available in the TUI yet; use `ribbit run --mode review TASK`"


def tui_mode(modes: tuple[str, ...]):  # type: ignore[no-untyped-def]
    """--mode for the TUI: one of `modes`, review refused at parsing with the sentence the app would say."""

    def parse(text: str) -> str:
        if text == "review":
            raise argparse.ArgumentTypeError(TUI_NO_REVIEW)
        if text not in modes:
            raise argparse.ArgumentTypeError(f"{text!r} is not a mode (choose from {', '.join(modes)})")
        return text

    return parse


def engine_options(args: argparse.Namespace) -> EngineOptions:
    """`--threads`, `--draft`, `--temperature` as the model loader takes them (passed, never kept globally)."""
    return EngineOptions(threads=args.threads, draft=args.draft, temperature=args.temperature)
