"""What the test phase decides, apart from running things: which of the agent's changes to put back before
grading, how to reach named tests the task's commands did not run, and the outcome of a job.

Test files are the agent's to read, not to change: a patch that edits a test, adds a conftest.py or a
module shadowing the test runner could make a wrong fix pass. Every such change is put back to the base
commit before the hidden tests go in — the same split SWE-bench makes between a fix and its tests.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePosixPath

from agent.evaluation.tasks import EvalTask, patch_files, test_file_of
from agent.evaluation.testlog import TestStatus

# Folders whose every file counts as a test file (SWE-bench's split uses the same words).
TEST_DIRS = frozenset({"test", "tests", "testing", "e2e", "__tests__"})
# Files that change how tests run or are reported, wherever they are.
RUNNER_FILES = frozenset({"conftest.py", "pytest.py", "unittest.py", "sitecustomize.py", "usercustomize.py"})
# Top-level packages that would shadow the test runner (`python -m pytest` imports from the checkout first).
RUNNER_PACKAGES = frozenset({"pytest", "_pytest", "unittest"})


def is_test_path(path: str) -> bool:
    """Whether a repository path is a test file (or test machinery) the agent must not change."""
    parts = PurePosixPath(path).parts
    if not parts:
        return False
    name = parts[-1]
    if name in RUNNER_FILES or parts[0] in RUNNER_PACKAGES or any(p in TEST_DIRS for p in parts[:-1]):
        return True
    stem = name.split(".", 1)[0]
    return (
        stem.startswith("test_") or stem.endswith(("_test", "_tests")) or stem in ("test", "tests")
        or ".test." in name or ".spec." in name
    )


def files_to_put_back(agent_patch: str, task: EvalTask) -> list[str]:
    """Files the agent's patch touched that are tests: test paths, files holding named tests, the test patch's."""
    protected = set(task.named_test_files()) | set(task.test_patch_files())
    return [f for f in patch_files(agent_patch) if is_test_path(f) or f in protected]


def unittest_id(name: str) -> str | None:
    """A dotted unittest id from `pkg.mod.Class.test_x` or unittest's `test_x (pkg.mod.Class)` form."""
    name = name.strip()
    if name.endswith(")") and " (" in name:
        method, _, where = name[:-1].partition(" (")
        if method.isidentifier() and all(p.isidentifier() for p in where.split(".")):
            return where if where.endswith("." + method) else f"{where}.{method}"
        return None
    parts = name.split(".")
    return name if len(parts) >= 2 and all(p.isidentifier() for p in parts) else None


def followup_commands(missing: Iterable[str], exists: Callable[[str], bool] = lambda path: True) -> list[str]:
    """Commands that run named tests the task's own commands never reported, wherever they live.

    Pytest ids: their files, whole (a node id that does not exist would stop pytest before it runs
    anything; a file that does not exist is left out). Unittest ids: by name (one that does not exist
    fails alone). A bare name (`test_x`) cannot be located and stays missing.
    """
    pytest_files: list[str] = []
    unittest_ids: list[str] = []
    for name in missing:
        if (path := test_file_of(name)) is not None:
            if path not in pytest_files and exists(path):
                pytest_files.append(path)
        elif (dotted := unittest_id(name)) is not None and dotted not in unittest_ids:
            unittest_ids.append(dotted)
    commands = []
    if pytest_files:
        commands.append("python -m pytest -rA -p no:cacheprovider " + " ".join(shlex.quote(f) for f in pytest_files))
    if unittest_ids:
        commands.append("python -m unittest -v " + " ".join(shlex.quote(i) for i in unittest_ids))
    return commands


def verdict(
    f2p: Mapping[str, TestStatus], p2p: Mapping[str, TestStatus], failing_command: str | None
) -> tuple[bool, str]:
    """(resolved, why not). With named tests they alone decide; without, every test command must pass."""
    if not f2p and not p2p:
        return failing_command is None, failing_command or ""
    parts = []
    for label, statuses in (("fail-to-pass", f2p), ("pass-to-pass", p2p)):
        failed = [n for n, s in statuses.items() if s == "failed"]
        missing = [n for n, s in statuses.items() if s == "missing"]
        verb = "still fail" if label == "fail-to-pass" else "broke"
        if failed:
            parts.append(f"{len(failed)}/{len(statuses)} {label} tests {verb} ({failed[0]})")
        if missing:
            parts.append(f"{len(missing)}/{len(statuses)} {label} tests did not run ({missing[0]})")
    return not parts, "; ".join(parts)
