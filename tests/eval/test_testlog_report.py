"""Per-test outcomes from runner output, and the report formats."""

from __future__ import annotations

import json

from agent.evaluation.report import JobResult, markdown_report, prediction_name, predictions_files, summarise
from agent.evaluation.testlog import parse_test_log, status_of

PYTEST_LOG = """\
tests/test_a.py::test_one PASSED                                         [ 33%]
=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
PASSED tests/test_a.py::test_param[a b]
FAILED tests/test_a.py::test_two - assert 1 == 2
ERROR tests/test_b.py - ImportError: cannot import name 'x'
XFAIL tests/test_a.py::test_known - reason
"""

UNITTEST_LOG = """\
test_ok (tests.test_m.MTest.test_ok) ... ok
test_bad (tests.test_m.MTest.test_bad) ... FAIL
test_old (tests.test_m.MTest) ... ERROR
test_doc (tests.test_m.MTest.test_doc)
A docstring line. ... ok
"""


def test_pytest_statuses() -> None:
    s = parse_test_log(PYTEST_LOG)
    assert s["tests/test_a.py::test_one"] == "passed"
    assert s["tests/test_a.py::test_param[a b]"] == "passed"
    assert s["tests/test_a.py::test_two"] == "failed"
    assert s["tests/test_a.py::test_known"] == "passed"
    assert status_of("tests/test_b.py::test_never_collected", s) == "missing"
    assert "tests/test_b.py" not in s


def test_unittest_statuses_and_dotted_ids() -> None:
    s = parse_test_log(UNITTEST_LOG)
    assert s["tests.test_m.MTest.test_ok"] == "passed"
    assert s["test_ok (tests.test_m.MTest.test_ok)"] == "passed"
    assert s["tests.test_m.MTest.test_bad"] == "failed"
    assert s["tests.test_m.MTest.test_old"] == "failed"
    assert s["tests.test_m.MTest.test_doc"] == "passed"


def test_a_failure_anywhere_wins() -> None:
    s = parse_test_log("PASSED t.py::x\nFAILED t.py::x - flaky\nPASSED t.py::x\n")
    assert s["t.py::x"] == "failed"


def test_reports() -> None:
    results = [
        JobResult(task_id="t1", model="m", outcome="resolved", steps=3, patch="diff --git a/x b/x\n"),
        JobResult(task_id="t2", model="m", outcome="patch_does_not_apply", message="corrupt | patch"),
    ]
    (summary,) = summarise(results, ["m"])
    assert summary.resolved == 1 and summary.resolved_rate == 0.5
    assert summary.outcomes["patch_does_not_apply"] == 1
    md = markdown_report(results, ["m"], ["t1", "t2", "t3"])
    assert "| m | 1/2 (50.0%) |" in md
    assert "| t2 | m | patch does not apply |" in md and "corrupt \\| patch" in md
    assert "| t3 | m | (not run) |" in md
    assert "| t1 | resolved |" in md and "| t3 | — |" in md  # side by side
    (name,) = predictions_files(results, ["m"])
    lines = [json.loads(line) for line in predictions_files(results, ["m"])[name].splitlines()]
    assert name == prediction_name("m") + ".jsonl"
    assert lines[0] == {"instance_id": "t1", "model_name_or_path": prediction_name("m"), "model_patch": "diff --git a/x b/x\n"}
