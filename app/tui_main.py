"""`ribbit` with no subcommand: the TUI in a repository folder."""

from __future__ import annotations

import argparse
import sys

from agent.session import Limits
from agent.session import SessionError, SessionStore
from agent.session import SetupError, check_repo
from app.args import engine_options
from app.visible import visible
from app.app import make_app, run_app


def tui_main(args: argparse.Namespace) -> int:
    # A script, a cron job or an editor's task runner would get escape codes in its file and a screen
    # that waits for keys forever: refuse at once.
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("ribbit: error: the TUI needs a terminal for its input and output; "
              "for scripts use `ribbit run \"TASK\"` (see `ribbit run --help`)", file=sys.stderr)
        return 2
    try:
        root = check_repo(args.repo)
        if getattr(args, "cont", False) and getattr(args, "resume", None) is not None:
            raise SetupError("--continue and --resume name different sessions; give one")
        if getattr(args, "cont", False):
            SessionStore(root).latest()  # nothing to continue: say so before the screen opens
        elif getattr(args, "resume", None):
            SessionStore(root).load(args.resume)
    except (SetupError, SessionError) as exc:
        print(f"ribbit: error: {visible(str(exc), one_line=True)}", file=sys.stderr)
        return 1
    app = make_app(
        root, args.model, mode=args.mode, context=args.context, no_sandbox=args.no_sandbox,
        reasoning=args.reasoning, limits=Limits(context=args.context, tool_output_tokens=args.tool_output_tokens),
        continue_last=getattr(args, "cont", False), resume=getattr(args, "resume", None), engine=engine_options(args),
    )
    return run_app(app)
