"""Argument parsing shared by every `ribbit` command: errors as exceptions, so each command's main
decides the exit code (2) and prints one line; value types with messages a user can act on."""

from __future__ import annotations

import argparse

from models.backends import EngineOptions


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so main() controls the exit code (2) and message."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: error: {message}")


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 5.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 5")
    return value


def on_off(text: str) -> bool:
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"{text!r} is not on or off")
    return text == "on"


def engine_options(args: argparse.Namespace) -> EngineOptions:
    """`--threads`, `--draft`, `--temperature` as the model loader takes them (passed, never kept globally)."""
    return EngineOptions(threads=args.threads, draft=args.draft, temperature=args.temperature)
