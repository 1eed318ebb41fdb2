"""`ribbit doctor`: what works on this machine, and why not. Exit 1 when something ribbit needs fails
(llama.cpp, the model SPEC, an endpoint, the folder to work in, the state folder): a line marked `!!`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from app.args import Parser


def doctor_parser() -> Parser:
    parser = Parser(prog="ribbit doctor", description="what works on this machine, and why not "
                    "(exit 1 when something ribbit needs does not)")
    parser.add_argument("--repo", default=".", metavar="DIR", help="the folder ribbit would work in (default: current folder)")
    parser.add_argument("--model", default=None, metavar="SPEC",
                        help="the model SPEC to check (default: RIBBIT_MODEL, else the embedded demo model)")
    return parser


def doctor_main(argv: Sequence[str]) -> int:
    args = doctor_parser().parse_args(list(argv))
    from agent.session import agent_checks
    from models.backends import resolve_spec
    from models.diagnostics import NEEDED, model_checks, planned_memory_bytes

    root = Path(args.repo).expanduser()
    folder = root.resolve() if root.exists() else root.absolute()
    checks = [*model_checks(args.model), *agent_checks(folder, model_bytes=planned_memory_bytes(resolve_spec(args.model)))]
    width = max(len(c.name) for c in checks)
    for check in checks:
        mark = "ok " if check.ok else "!! "
        print(f"{mark}{check.name.ljust(width)}  {check.detail}")
    needed = (*NEEDED, "repository", "state folder")
    return 0 if all(c.ok for c in checks if c.name in needed) else 1
