"""`ribbit undo [--list | SESSION] [--repo DIR]`: roll back an agent session from the journal."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from agent.session import JournalError, journaled_sessions, undo_session
from app.args import Parser
from app.visible import visible, visible_line
from app.words import counted


def _parser() -> Parser:
    parser = Parser(prog="ribbit undo", description="put back the files an agent session changed")
    parser.add_argument("session", nargs="?", help="the session to undo (default: the latest); see --list")
    parser.add_argument("--list", action="store_true", help="list the journaled sessions")
    parser.add_argument("--repo", default=".", help="repository (default: current folder)")
    parser.add_argument(
        "--uncertain", action="store_true",
        help="also take back the files changed while a command ran outside the overlay (no sandbox, or none on "
             "this system), which ribbit cannot tell from your own changes made meanwhile; of a session already "
             "undone, just those",
    )
    return parser


def undo_main(argv: list[str]) -> int:
    args = _parser().parse_args(list(argv))
    if args.list and args.session:
        print("ribbit undo: error: give either --list or a SESSION", file=sys.stderr)
        return 2
    root = Path(args.repo).expanduser()
    if not root.is_dir():
        print(f"ribbit undo: error: {root} is not a folder", file=sys.stderr)
        return 1
    try:
        if args.list:
            listed, kind = journaled_sessions(root)
            if not listed:
                print(f"no ribbit sessions in {kind}")
            for info in listed:
                when = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.started))
                state = "undone" if info.reverted else (f"{counted(info.steps, 'step')} changed files" if info.steps
                                                         else "no step changed files")
                if info.cut_short:
                    state += " + a last step not recorded (disk full, crash, or still running)"
                names = [visible_line(f, 120) for f in info.files[:6]]  # agent-made names, escaped
                files = ", ".join(names) + (" ..." if len(info.files) > 6 else "") or "no files changed"
                print(visible(f"{info.session_id}  {when}  {state}  {files}", one_line=True))  # agent-made names
            return 0
        result = undo_session(root, args.session, uncertain_too=args.uncertain)
    except JournalError as exc:
        print(f"ribbit undo: error: {visible(str(exc), one_line=True)}", file=sys.stderr)
        return 1
    print(visible(result.summary()))
    return 1 if result.not_restored else 0  # a partial undo is not a success: the line names what was left
