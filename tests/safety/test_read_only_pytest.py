"""Issue 40: an allowed pytest run (read-only in the sandbox) gives the model pytest's output, not eight
lines of warnings that it cannot write .pytest_cache — and it is not taken for a command that tried to write."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agent.paths import project_state
from tests.conftest import tree_bytes, xml_call
from tests.safety.helpers import tool_outputs
from tests.safety.sandbox_helpers import ScriptedApprover, session


def test_an_allowed_pytest_runs_read_only_without_cache_warnings(repo: Path, tmp_path: Path) -> None:
    prefix = f"{sys.executable} -m pytest"
    store = project_state(repo) / "allow.json"
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps({"allow": [prefix]}))
    before = tree_bytes(repo)
    turns = [xml_call("Bash", command=f"{prefix} -q test_calc.py"), "done"]
    _, recorder, approver = session(repo, tmp_path, *turns, mode="ask", approver=ScriptedApprover())
    (output,) = tool_outputs(recorder)
    assert "1 failed" in output  # pytest ran: add() subtracts
    assert "cache" not in output.lower() and "read-only" not in output.lower(), output
    assert approver.requests == []  # run without a question, and not asked again for write access
    assert tree_bytes(repo) == before and not (repo / ".pytest_cache").exists()
