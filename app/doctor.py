"""`ribbit doctor`: what works on this machine, and why not."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path


def doctor_main(argv: Sequence[str]) -> int:
    from agent.session import agent_checks
    from models.diagnostics import ENDPOINT_CHECKS, model_checks, planned_memory_bytes
    from models.spec import resolve_spec

    root = Path(argv[argv.index("--repo") + 1]) if "--repo" in argv[:-1] else Path.cwd()
    spec = argv[argv.index("--model") + 1] if "--model" in argv[:-1] else None
    checks = [*model_checks(spec), *agent_checks(root.resolve(), model_bytes=planned_memory_bytes(resolve_spec(spec)))]
    width = max(len(c.name) for c in checks)
    for check in checks:
        mark = "ok " if check.ok else "!! "
        print(f"{mark}{check.name.ljust(width)}  {check.detail}")
    return 0 if all(c.ok for c in checks if c.name in ("llama.cpp", "embedded model", *ENDPOINT_CHECKS)) else 1


if __name__ == "__main__":
    sys.exit(doctor_main(sys.argv[1:]))
