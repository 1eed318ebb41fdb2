"""`ribbit` with no subcommand: the TUI in a repository folder."""

from __future__ import annotations

import argparse
import sys

from agent.loop import Limits
from agent.workspace import SetupError, check_repo
from app.app import make_app


def tui_main(args: argparse.Namespace) -> int:
    try:
        root = check_repo(args.repo)
    except SetupError as exc:
        print(f"ribbit: error: {exc}", file=sys.stderr)
        return 1
    app = make_app(
        root, args.model, mode=args.mode, context=args.context, no_sandbox=args.no_sandbox,
        reasoning=args.reasoning, limits=Limits(context=args.context, tool_output_tokens=args.tool_output_tokens),
    )
    try:
        code = app.run()
    finally:
        # Quitting stops the agent (cancel + reject open questions); let it finish its current
        # atomic write so nothing is left half done.
        app.shutdown_agent()
        app.join_agent()
        app.close_workspace()
    return code or 0
