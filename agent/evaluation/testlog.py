"""Per-test outcomes from test-runner output: pytest (`-rA` summary or `-v` lines) and unittest (`-v`).

Names are kept as the runner prints them: pytest node ids (`tests/test_x.py::test_y[p]`) and unittest's
`test_y (module.Class.test_y)` — the dotted id `module.Class.test_y` is recorded too.
"""

from __future__ import annotations

import re
from typing import Literal

TestStatus = Literal["passed", "failed", "missing"]

_PYTEST_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS) (\S.*?)(?: - .*)?$")
_PYTEST_VERBOSE = re.compile(r"^(\S+::\S.*?) (PASSED|FAILED|ERROR|XFAIL|XPASS)(?:\s+\[\s*\d+%\])?$")
_UNITTEST = re.compile(
    r"^(\w+) \(([\w.]+)\)(?:\n.*?)? \.\.\. (ok|FAIL|ERROR|expected failure|unexpected success)$", re.MULTILINE
)

_PASS = {"PASSED", "XFAIL", "ok", "expected failure"}


def parse_test_log(text: str) -> dict[str, TestStatus]:
    """Test name -> passed / failed. A test reported more than once counts as failed if any report failed."""
    statuses: dict[str, TestStatus] = {}

    def record(name: str, word: str) -> None:
        status: TestStatus = "passed" if word in _PASS else "failed"
        if statuses.get(name) != "failed":
            statuses[name] = status

    for raw in text.splitlines():
        line = raw.rstrip()
        if match := _PYTEST_SUMMARY.match(line):
            if "::" in match.group(2) or match.group(1) != "ERROR":
                record(match.group(2), match.group(1))
        elif match := _PYTEST_VERBOSE.match(line):
            record(match.group(1), match.group(2))
    for match in _UNITTEST.finditer(text):
        method, where, word = match.groups()
        record(f"{method} ({where})", word)
        dotted = where if where.endswith("." + method) else f"{where}.{method}"
        record(dotted, word)
    return statuses


def status_of(name: str, statuses: dict[str, TestStatus]) -> TestStatus:
    return statuses.get(name.strip(), "missing")
