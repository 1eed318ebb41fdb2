"""`ribbit tour`: a scripted session on a scratch copy of a tiny shipped project, offline and without a model.

Part 1 runs the TUI with a `replay:` recording (scripted-tour.jsonl): a command question, a rejected diff with
a reason, an approved one, then /diff and /undo. Part 2 runs review mode as `ribbit run --mode review` does
(scripted-review.jsonl): the agent works in a worktree of its own and the user reviews its patch hunk by hunk
on standard input. What is scripted is the model's side only; the diffs, approvals, sandbox, journal and
undo are ribbit's own, on real files.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from app.args import Parser

DATA = Path(__file__).resolve().parent
TOUR_REPLAY = DATA / "scripted-tour.jsonl"
REVIEW_REPLAY = DATA / "scripted-review.jsonl"
PROJECT = DATA / "project.json"
TASK = "The tests fail: fahrenheit_to_celsius(212) should be 100. Fix it."
REVIEW_TASK = "Fix fahrenheit_to_celsius again, this time in review mode."
INTRO = ("ribbit tour: a SCRIPTED session. The model is a recording (replay:), not a model: its answers were "
         "written in advance and ignore what you type. Its text says which key to press at each step.")


def tour_parser() -> Parser:
    parser = Parser(prog="ribbit tour", description="a scripted, offline tour of ribbit on a scratch copy of a tiny "
                    "project: a diff review, a rejection with a reason, an approval, undo and review mode")
    parser.add_argument("--dir", default=None, metavar="DIR",
                        help="where to put the scratch project (a new or empty folder; default: a new temporary one)")
    parser.add_argument("--no-sandbox", action="store_true", help="run the tour's one command without the sandbox")
    return parser


def tour_main(argv: Sequence[str]) -> int:
    args = tour_parser().parse_args(list(argv))
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("ribbit tour: error: the tour needs a terminal for its input and output", file=sys.stderr)
        return 2
    from agent.session import ScratchError, check_state, make_scratch_project, SetupError

    folder = Path(args.dir).expanduser() if args.dir else Path(tempfile.mkdtemp(prefix="ribbit-tour-"))
    try:
        check_state()
        files = json.loads(PROJECT.read_text(encoding="utf-8"))
        root = make_scratch_project(folder, files)
    except (ScratchError, SetupError) as exc:
        print(f"ribbit tour: error: {exc}", file=sys.stderr)
        return 1
    print(f"ribbit tour: a scripted session on a scratch copy of a tiny project in {root}\n"
          "Part 1 of 2 opens ribbit's screen; press Ctrl+C twice there to go on to part 2.", file=sys.stderr)
    code = part_one(root, args)
    if code != 0:
        return code
    return part_two(root, args)


def part_one(root: Path, args: argparse.Namespace) -> int:
    from app.app import make_app, run_app

    return run_app(make_app(root, f"replay:{TOUR_REPLAY}", mode="ask", no_sandbox=args.no_sandbox, intro=INTRO, task=TASK))


def part_two(root: Path, args: argparse.Namespace) -> int:
    from app.run import LineReader, StdinApprover, run_review

    print("\nribbit tour, part 2 of 2: review mode, as `ribbit run --mode review TASK` runs it. [scripted]\n"
          "The agent works in a temporary worktree; at the end each hunk of its patch is shown here: type y and "
          "Enter to apply it, n to leave it out.\n", file=sys.stderr)
    run_args = argparse.Namespace(repo=str(root), no_sandbox=args.no_sandbox, reasoning=None, patch_out=None)
    from agent.session import Limits
    from app.run import ProgressPrinter
    from models.backends import load_model

    model = load_model(f"replay:{REVIEW_REPLAY}", context=131_072)
    try:
        code = run_review(model, run_args, REVIEW_TASK, Limits(), ProgressPrinter(sys.stderr),
                          StdinApprover(LineReader(sys.stdin), sys.stderr), sys.stdout)
    finally:
        model.close()
    print(f"\nribbit tour: the end. What you saw was scripted; the files it changed are real, in {root}\n"
          "(remove it with: rm -rf -- " + str(root) + ").\n"
          "Next: a model that edits. See `ribbit doctor` and the README's Models section.", file=sys.stderr)
    return code
