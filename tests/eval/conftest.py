"""Small evaluation task sets built in temporary folders (unittest-based, so each test run is quick)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
CALC_FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
VISIBLE = (
    "import unittest\n\nfrom calc import mul\n\n\nclass MulTest(unittest.TestCase):\n"
    "    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n"
)
HIDDEN = (
    "import unittest\n\nfrom calc import add\n\n\nclass AddTest(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)


def make_task(root: Path, name: str) -> Path:
    """A task folder: repo/ (buggy calc.add, a passing visible test), hidden/ (the deciding test)."""
    folder = root / name
    (folder / "repo" / "tests").mkdir(parents=True)
    (folder / "repo" / "calc.py").write_text(CALC)
    (folder / "repo" / "tests" / "__init__.py").write_text("")
    (folder / "repo" / "tests" / "test_mul.py").write_text(VISIBLE)
    (folder / "hidden" / "tests").mkdir(parents=True)
    (folder / "hidden" / "tests" / "test_add.py").write_text(HIDDEN)
    (folder / "solution").mkdir()
    (folder / "solution" / "calc.py").write_text(CALC_FIXED)
    (folder / "task.json").write_text(json.dumps({
        "problem_statement": "calc.add subtracts; it should add.",
        "test_commands": ["python -m unittest discover -v -s tests -t ."],
        "fail_to_pass": ["tests.test_add.AddTest.test_add"],
        "pass_to_pass": ["tests.test_mul.MulTest.test_mul"],
    }))
    return folder


@pytest.fixture
def task_set(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    root.mkdir()
    make_task(root, "calc-one")
    make_task(root, "calc-two")
    return root
