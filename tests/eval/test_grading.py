"""The test phase users can trust: every named test runs wherever it lives, and test files the agent
changed are put back before grading (visible and hidden ones, conftest.py and runner shadows too)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.evaluation import runner as runner_module
from agent.evaluation.grading import files_to_put_back, followup_commands, is_test_path, unittest_id
from agent.evaluation.runner import EvalConfig, EvalRun
from agent.evaluation.tasks import load_tasks
from tests.conftest import xml_call
from tests.eval.conftest import CALC, CALC_FIXED, make_task
from tests.eval.oracle import oracle_models, solution_turns, write_replay

# pytest without the plugins installed here (they only slow it down); the runner's own follow-up
# command for tests these commands miss is plain `python -m pytest`.
PYTEST = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -rA -p no:cacheprovider"


def make_pytest_task(root: Path, name: str) -> Path:
    """A pytest task whose pass-to-pass tests live where its test command never looks (more/, no __init__)."""
    folder = root / name
    (folder / "repo" / "more").mkdir(parents=True)
    (folder / "repo" / "calc.py").write_text(CALC)
    (folder / "repo" / "test_calc.py").write_text("from calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n")
    (folder / "repo" / "more" / "test_more.py").write_text(
        "from calc import mul\n\n\ndef test_mul_zero():\n    assert mul(0, 9) == 0\n"
    )
    (folder / "hidden").mkdir()
    (folder / "hidden" / "test_hidden_add.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    (folder / "solution").mkdir()
    (folder / "solution" / "calc.py").write_text(CALC_FIXED)
    (folder / "task.json").write_text(json.dumps({
        "problem_statement": "calc.add subtracts; it should add.",
        "test_commands": [f"{PYTEST} test_calc.py test_hidden_add.py"],
        "fail_to_pass": ["test_hidden_add.py::test_add"],
        "pass_to_pass": ["test_calc.py::test_mul", "more/test_more.py::test_mul_zero"],
    }))
    return folder


def make_unittest_elsewhere_task(root: Path, name: str) -> Path:
    """The unittest task of conftest.py, plus a pass-to-pass test outside the discovered folder."""
    folder = make_task(root, name)
    (folder / "repo" / "checks").mkdir()
    (folder / "repo" / "checks" / "test_extra.py").write_text(
        "import unittest\n\nfrom calc import mul\n\n\nclass ExtraTest(unittest.TestCase):\n"
        "    def test_mul_one(self):\n        self.assertEqual(mul(7, 1), 7)\n"
    )
    task = json.loads((folder / "task.json").read_text())
    task["pass_to_pass"].append("test_mul_one (checks.test_extra.ExtraTest.test_mul_one)")
    (folder / "task.json").write_text(json.dumps(task))
    return folder


def run(tasks: Path, models: list[str], out: Path, **config: object):
    outcome = EvalRun(load_tasks(tasks), models, EvalConfig(out=out, **config)).run()  # type: ignore[arg-type]
    assert not outcome.interrupted
    return outcome.results


def test_oracle_resolves_all_when_pass_to_pass_tests_live_elsewhere(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    make_pytest_task(tasks, "pytest-elsewhere")
    make_unittest_elsewhere_task(tasks, "unittest-elsewhere")
    results = run(tasks, [oracle_models(tasks, tmp_path / "oracle")], tmp_path / "out", jobs=2)
    assert {r.task_id: (r.outcome, r.message) for r in results} == {
        "pytest-elsewhere": ("resolved", ""), "unittest-elsewhere": ("resolved", ""),
    }
    by_id = {r.task_id: r for r in results}
    assert by_id["pytest-elsewhere"].pass_to_pass == {"test_calc.py::test_mul": "passed",
                                                      "more/test_more.py::test_mul_zero": "passed"}
    assert by_id["unittest-elsewhere"].pass_to_pass["test_mul_one (checks.test_extra.ExtraTest.test_mul_one)"] == "passed"
    # They ran, in a command of their own, and the log shows it.
    assert [c.command for c in by_id["pytest-elsewhere"].commands][1:] == [
        "python -m pytest -rA -p no:cacheprovider more/test_more.py"]
    log = next((tmp_path / "out" / "work").rglob("unittest-elsewhere.tests.log")).read_text()
    assert "python -m unittest -v checks.test_extra.ExtraTest.test_mul_one" in log and "test_mul_one" in log


def test_a_named_test_that_exists_nowhere_is_reported_as_not_run(tmp_path: Path) -> None:
    folder = make_pytest_task(tmp_path / "tasks", "ghost")
    task = json.loads((folder / "task.json").read_text())
    task["pass_to_pass"].append("more/test_more.py::test_that_does_not_exist")
    (folder / "task.json").write_text(json.dumps(task))
    (result,) = run(tmp_path / "tasks", [oracle_models(tmp_path / "tasks", tmp_path / "oracle")], tmp_path / "out")
    assert result.outcome == "tests_fail"
    assert result.message == "1/3 pass-to-pass tests did not run (more/test_more.py::test_that_does_not_exist)"


def test_visible_and_hidden_test_files_the_agent_edited_are_put_back(tmp_path: Path, task_set: Path) -> None:
    """The oracle fixes calc.py, but also "fixes" the visible test and writes its own test at the hidden
    test's path: its test changes are put back, the real tests decide, and it resolves."""
    folder = task_set / "calc-one"
    turns = [
        *solution_turns(folder / "solution"),
        xml_call("Read", file_path="tests/test_mul.py"),
        xml_call("Write", file_path="tests/test_mul.py", content="import unittest\n\n\nclass MulTest(unittest.TestCase):\n"
                 "    def test_mul(self):\n        self.fail('the agent broke this test')\n"),
        xml_call("Write", file_path="tests/test_add.py", content="raise SystemExit('not the hidden test')\n"),
    ]
    model = f"replay:{write_replay(tmp_path / 'meddler.jsonl', turns)}"
    results = run(task_set, [model], tmp_path / "out")
    for result in results:
        if result.task_id == "calc-one":
            assert result.outcome == "resolved", result.message
            assert result.tests_put_back == ["tests/test_add.py", "tests/test_mul.py"]
            assert "tests/test_mul.py" in result.patch  # the prediction keeps what the agent did
    report = (tmp_path / "out" / "report.md").read_text()
    assert "put back the agent's changes to tests/test_add.py, tests/test_mul.py" in report


CHEAT = '''import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
'''


def test_a_conftest_that_forces_passes_is_removed_before_grading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = tmp_path / "tasks"
    make_pytest_task(tasks, "cheat")
    cheat = [xml_call("Write", file_path="conftest.py", content=CHEAT)]  # no fix at all
    model = f"replay:{write_replay(tmp_path / 'cheat.jsonl', cheat)}"
    (result,) = run(tasks, [model], tmp_path / "out")
    assert result.outcome == "tests_fail"
    assert result.tests_put_back == ["conftest.py"]
    assert result.runs_later == ["conftest.py"]  # the job's note names it: it runs with every pytest
    assert "changed files that run code later: conftest.py" in (tmp_path / "out" / "report.md").read_text()
    assert result.fail_to_pass == {"test_hidden_add.py::test_add": "failed"}
    # The check has teeth: with nothing put back, the same patch would "resolve" the task.
    monkeypatch.setattr(runner_module, "files_to_put_back", lambda patch, task: [])
    (task,) = load_tasks(tasks)
    fooled = EvalRun([task], [model], EvalConfig(out=tmp_path / "out-fooled")).score_patch(task, model, result.patch)
    assert fooled is not None and fooled.outcome == "resolved"


def test_which_paths_are_tests() -> None:
    tests = ["tests/test_x.py", "test_calc.py", "pkg/calc_test.py", "src/tests/helpers.py", "conftest.py",
             "pkg/sub/conftest.py", "pytest.py", "_pytest/hack.py", "sitecustomize.py", "web/app.test.js",
             "e2e/run.sh", "testing/util.py", "pkg/tests.py"]
    sources = ["calc.py", "pkg/latest.py", "contest.py", "src/attest/core.py", "docs/testing.md", "pkg/testdata.py"]
    assert [p for p in tests if not is_test_path(p)] == []
    assert [p for p in sources if is_test_path(p)] == []


def test_put_back_takes_named_and_test_patch_files_too(task_set: Path) -> None:
    (task, _) = load_tasks(task_set)
    task = task.model_copy(update={
        "pass_to_pass": ["checks_mul.py::test_mul"],
        "test_patch": "diff --git a/fixtures.json b/fixtures.json\n--- a/fixtures.json\n+++ b/fixtures.json\n@@ -1 +1 @@\n-1\n+2\n",
    })
    patch = "".join(
        f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-a\n+b\n"
        for p in ("calc.py", "checks_mul.py", "fixtures.json", "tests/test_mul.py")
    )
    assert files_to_put_back(patch, task) == ["checks_mul.py", "fixtures.json", "tests/test_mul.py"]


def test_followup_commands_reach_each_kind_of_name() -> None:
    commands = followup_commands([
        "tests/test_a b.py::test_one[x y]", "pkg.tests.test_m.MTest.test_ok", "test_old (pkg.tests.test_m.MTest)",
        "test_bare_name", "tests/test_a b.py::T::test_two", "gone/test_gone.py::test_x",
    ], exists=lambda path: not path.startswith("gone/"))
    assert commands == [
        "python -m pytest -rA -p no:cacheprovider 'tests/test_a b.py'",
        "python -m unittest -v pkg.tests.test_m.MTest.test_ok pkg.tests.test_m.MTest.test_old",
    ]
    assert followup_commands(["test_bare_name"]) == []
    assert unittest_id("test_x (a.b.C.test_x)") == "a.b.C.test_x"
    assert unittest_id("test_x; rm -rf / (a.b)") is None
