"""`ribbit allow [--repo DIR] [--add PREFIX | --remove PREFIX | --clear]`: the command prefixes that run
without asking in a project (read-only, in the sandbox): list them, revoke them, or add one."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from app.args import Parser
from app.visible import visible


def allow_parser() -> Parser:
    parser = Parser(prog="ribbit allow", description="list, revoke or add the command prefixes that run without "
                    "asking in a project (in ask and auto-edit, read-only in the sandbox)")
    parser.add_argument("--repo", default=".", metavar="DIR", help="the project (default: current folder)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--remove", metavar="PREFIX", help="revoke PREFIX (as listed, or its number in the list)")
    what.add_argument("--add", metavar="COMMAND", help="allow the prefix 'always allow' would take from COMMAND")
    what.add_argument("--clear", action="store_true", help="revoke every prefix you allowed here")
    return parser


def allow_main(argv: Sequence[str]) -> int:
    args = allow_parser().parse_args(list(argv))
    from agent.session import SetupError, check_repo, command_prefix, project_allow_list

    try:
        root = check_repo(args.repo)
    except SetupError as exc:
        print(f"ribbit allow: error: {visible(str(exc), one_line=True)}", file=sys.stderr)
        return 1
    allow = project_allow_list(root)
    try:
        if args.add is not None:
            prefix = command_prefix(args.add)
            if not prefix:
                print("ribbit allow: error: a command that chains, redirects or substitutes (; & | < > ` $ ...) is "
                      "never run without asking", file=sys.stderr)
                return 2
            allow.add(prefix)
            print(f"allowed in {root}: commands starting {prefix!r} (read-only, without asking)")
            return 0
        if args.clear:
            for prefix in list(allow.user):
                allow.remove(prefix)
            print(f"no prefixes allowed in {root} any more (the built-in read-only list stays)")
            return 0
        if args.remove is not None:
            target = args.remove
            if target.isdigit() and 1 <= int(target) <= len(allow.user):
                target = allow.user[int(target) - 1]
            if not allow.remove(target):
                print(f"ribbit allow: error: {target!r} is not among the prefixes allowed in {root}", file=sys.stderr)
                return 1
            print(f"revoked: commands starting {target!r} ask again in {root}")
            return 0
    except OSError as exc:
        print(f"ribbit allow: error: cannot save {allow.store}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if not allow.user:
        print(f"no prefixes allowed in {root}; besides the built-in read-only list ({', '.join(allow.defaults)})")
        return 0
    print(f"allowed in {root} (read-only, without asking; ribbit allow --remove N revokes):")
    for number, prefix in enumerate(allow.user, start=1):
        print(f"{number:>3}. {visible(prefix, one_line=True)}")
    return 0
