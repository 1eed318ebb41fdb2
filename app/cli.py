"""`ribbit` command line (docs/contract.md). Parses arguments and hands off; no agent logic here."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import warnings
from collections.abc import Sequence

from agent.session import MODES
from app.args import Parser, UsageError, on_off, positive, temperature, tui_mode
from models.backends import spec_forms
from models.drafting import DRAFT_MODES

SUBCOMMANDS = ("run", "acp", "quantize", "eval", "doctor", "undo", "allow", "tour")


def add_common(parser: argparse.ArgumentParser, tui: bool = False) -> None:
    parser.add_argument("--repo", default=".", help="repository to work in (default: current folder)")
    parser.add_argument("--model", default=None, help=f"model SPEC: {spec_forms()}")
    if tui:
        tui_modes = tuple(m for m in MODES if m != "review")
        parser.add_argument("--mode", default="ask", type=tui_mode(tui_modes), metavar="{" + ",".join(tui_modes) + "}",
                            help="approval mode (default: ask; review mode: `ribbit run --mode review`)")
    else:
        parser.add_argument("--mode", default="ask", choices=MODES, help="approval mode (default: ask)")
    parser.add_argument("--threads", type=positive, default=None,
                        help="llama.cpp threads (default: physical cores less measured contention; also RIBBIT_THREADS)")
    parser.add_argument("--draft", default="auto", choices=DRAFT_MODES,
                        help="speculative decoding drafts: prompt lookup, the model's MTP head, both (auto), or none")
    parser.add_argument("--temperature", type=temperature, default=None, help="sampling temperature (0: greedy)")
    parser.add_argument("--reasoning", type=on_off, default=None, metavar="on|off",
                        help="think before answering, for models whose chat template has the switch "
                             "(default: the model's own; on for FrogNano)")
    parser.add_argument("--tool-output-tokens", type=positive, default=None, metavar="N",
                        help="tokens one tool result may take (default: what the model reads in about a minute "
                             "at its measured prompt speed, 1,000-12,000)")


def ribbit_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ribbit")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def tui_parser() -> Parser:
    parser = Parser(prog="ribbit", description="ribbit: an offline coding agent for modest laptops")
    parser.add_argument("--version", action="version", version=f"ribbit {ribbit_version()}")
    add_common(parser, tui=True)
    parser.add_argument("--context", type=positive, default=131_072, metavar="N",
                        help="the largest context in tokens the conversation may grow to (default 131072; also "
                             "capped by what the model was trained on and by memory); it starts small and grows")
    parser.add_argument("--no-sandbox", action="store_true", help="run Bash without the sandbox")
    parser.add_argument("-c", "--continue", dest="cont", action="store_true",
                        help="reopen the last session in this repository")
    parser.add_argument("--resume", nargs="?", const="", default=None, metavar="ID",
                        help="reopen a saved session (without ID: choose one from a list)")
    parser.epilog = "subcommands: " + ", ".join(SUBCOMMANDS) + " (ribbit SUBCOMMAND --help)"
    return parser


def run_parser() -> Parser:
    parser = Parser(prog="ribbit run", description="run one task non-interactively and print its patch")
    parser.add_argument("task", help="the task text, or - to read it from standard input up to the first empty line")
    add_common(parser)
    parser.add_argument("--max-steps", type=positive, default=150, metavar="N",
                        help="stop after N assistant turns (exit 3; default 150)")
    parser.add_argument("--max-turn-tokens", type=positive, default=8192, metavar="N",
                        help="stop when one assistant turn writes N tokens (exit 3; default 8192)")
    parser.add_argument("--context", type=positive, default=131_072, metavar="N",
                        help="the largest context in tokens the conversation may grow to (default 131072; also "
                             "capped by what the model was trained on and by memory; it starts small and grows); "
                             "when the conversation no longer fits even after compaction: exit 3")
    parser.add_argument("--transcript", default=None, metavar="FILE", help="write JSON Lines events to FILE")
    parser.add_argument("--patch-out", default=None, metavar="FILE",
                        help="write the patch to FILE instead of stdout (the patch records what changed; "
                             "the checkout has it already)")
    parser.add_argument("--dry-run", action="store_true",
                        help="work in a temporary copy of the checkout and print the patch without applying it: "
                             "your files stay as they are (needs the sandbox, or --no-sandbox)")
    parser.add_argument("--no-sandbox", action="store_true", help="run Bash without the sandbox")
    parser.add_argument("-c", "--continue", dest="cont", action="store_true",
                        help="go on with the last session in this repository (its conversation, its undo journal)")
    parser.add_argument("--resume", default=None, metavar="ID", help="go on with the saved session ID")
    parser.add_argument("--commit", action="store_true",
                        help="when the model finishes, commit the files the session changed with a message it drafts "
                             "(your other staged and unstaged work stays as it is)")
    return parser


def acp_parser() -> Parser:
    parser = Parser(prog="ribbit acp", description="an Agent Client Protocol agent on standard input and output, "
                    "for editors (Zed, JetBrains, Neovim): docs/editors.md")
    add_common(parser)
    parser.add_argument("--context", type=positive, default=131_072, metavar="N",
                        help="context window in tokens (default 131072; capped by what the model was trained on)")
    parser.add_argument("--no-sandbox", action="store_true", help="run Bash without the sandbox")
    return parser


def report_thread_failures() -> None:
    """A background thread that dies (say, inside the file watcher's library on a 2,000-deep tree)
    prints one line and leaves its traceback in a file, instead of a stack on the user's terminal."""

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit or args.exc_value is None:
            return
        from agent.session import describe
        from app.visible import visible

        name = args.thread.name if args.thread is not None else "a background thread"
        line = visible(describe(args.exc_value), one_line=True)
        print(f"ribbit: warning: {name} stopped: {line}", file=sys.stderr)

    threading.excepthook = hook
    # watchdog warns once per directory when a burst of them is created (a message per id, so
    # Python's once-per-place filter does not hold): hundreds of lines that say nothing to a user.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"watchdog\.")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    report_thread_failures()
    command = args[0] if args and args[0] in SUBCOMMANDS else None
    try:
        if command == "run":
            from app.run import run_command

            parsed = run_parser().parse_args(args[1:])
            return run_command(parsed)
        if command == "acp":
            from app.acp.server import acp_main

            parsed = acp_parser().parse_args(args[1:])
            return acp_main(parsed, version=ribbit_version())
        if command == "quantize":
            from agent.session import tracked_files
            from models.llama_runtime import open_for_logits
            from quantize.cli import quantize_main

            return quantize_main(args[1:], load_for_verify=open_for_logits, list_tracked=tracked_files)
        if command == "eval":
            from app.eval_cmd import eval_main

            return eval_main(args[1:])
        if command == "doctor":
            from app.doctor import doctor_main

            return doctor_main(args[1:])
        if command == "undo":
            from app.undo_cmd import undo_main

            return undo_main(args[1:])
        if command == "allow":
            from app.allow_cmd import allow_main

            return allow_main(args[1:])
        if command == "tour":
            from app.tour import tour_main

            return tour_main(args[1:])
        from app.tui_main import tui_main

        parsed = tui_parser().parse_args(args)
        return tui_main(parsed)
    except UsageError as exc:  # every command's (their parsers raise it): one line, exit 2
        print(exc, file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"ribbit: error: {command or 'the TUI'} is not available in this build ({exc.name})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the contract: one line and exit 1, never a traceback
        from agent.session import describe
        from app.visible import visible

        print(f"ribbit: error: internal error: {visible(describe(exc), one_line=True)}", file=sys.stderr)
        return 1


def entry() -> int:
    """The `ribbit` command: main(), then Ctrl+C ignored while Python exits. CPython puts the default
    SIGINT handler back when it finalises, so a second Ctrl+C landing just after the summary killed the
    process by the signal (exit -2, not the contract's 130); an ignored signal stays ignored."""
    try:
        code = main()
    except KeyboardInterrupt:
        code = 130
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code


if __name__ == "__main__":
    sys.exit(entry())
