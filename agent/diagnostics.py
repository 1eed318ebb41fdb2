"""`ribbit doctor` lines about the agent side: sandbox and undo journal."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel


class Check(BaseModel):
    name: str
    ok: bool
    detail: str


def agent_checks(root: Path) -> list[Check]:
    from agent.journal import Journal, JournalError
    from agent.sandbox import bwrap_works

    checks: list[Check] = []
    ok, why = bwrap_works()
    checks.append(Check(name="sandbox", ok=ok, detail=why if ok else f"{why}; every Bash call will ask for approval"))
    try:
        journal = Journal(root)
        checks.append(Check(name="undo journal", ok=True, detail=journal.kind))
    except JournalError as exc:
        checks.append(Check(name="undo journal", ok=False, detail=str(exc)))
    return checks
