"""`ribbit doctor` lines about the agent side: sandbox, undo journal, file watcher."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel


class Check(BaseModel):
    name: str
    ok: bool
    detail: str


def agent_checks(root: Path) -> list[Check]:
    from agent.journal import journal_kind
    from agent.sandbox import sandbox_available
    from agent.watcher import count_dirs, inotify_watch_limit

    checks: list[Check] = []
    ok, why = sandbox_available()
    checks.append(Check(
        name="sandbox", ok=ok,
        detail=f"{why}: Bash runs read-only outside the repo, without network" if ok
        else f"NO SANDBOX: {why}; every Bash call will ask for approval, and full-auto needs --no-sandbox",
    ))
    # Says which journal is in use without creating a private one.
    checks.append(Check(name="undo journal", ok=root.is_dir(), detail=journal_kind(root)))
    limit = inotify_watch_limit()
    if limit is None:
        checks.append(Check(name="file watcher", ok=True, detail="watchdog (native observer for this system)"))
    else:
        budget = limit // 2
        dirs = count_dirs(root, budget) if root.is_dir() else 0
        inotify = dirs <= budget
        checks.append(Check(
            name="file watcher", ok=True,
            detail=f"inotify ({dirs} folders, limit {limit} watches)" if inotify
            else f"polling: more than {budget} folders for {limit} inotify watches",
        ))
    return checks
