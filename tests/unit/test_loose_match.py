"""The whitespace-tolerant match behind Edit, and the cycle detector, on their own."""

from __future__ import annotations

import pytest

from agent.core.repeats import RepeatDetector
from agent.core.tools.loose_match import AmbiguousLooseMatch, find_loose
from models.chat import ToolCall


def apply(text: str, old: str, new: str) -> str:
    match = find_loose(text, old, new)
    assert match is not None
    return text[: match.start] + match.new_text + text[match.end :]


def test_blank_lines_inside_the_block_and_a_file_without_a_final_newline() -> None:
    text = "def f():\n    a = 1\n    \n    return a"
    assert apply(text, "def f():\n  a = 1\n\n  return a\n", "def f():\n  a = 2\n\n  return a\n") == (
        "def f():\n    a = 2\n\n    return a"
    )


def test_spaces_in_the_file_for_tabs_in_old_string() -> None:
    text = "if x:\n  if y:\n    go()\n"
    assert apply(text, "if y:\n\tgo()", "if y:\n\tgo()\n\tstop()") == "if x:\n  if y:\n    go()\n    stop()\n"


@pytest.mark.parametrize("old, new", [
    ("    b()\n    c()", "b()\nc()"),  # new_string left of old_string's margin: where to is a guess
    ("\n  b()", "\n  x()"),  # blank lines at the edges
    ("   ", "x"),  # whitespace only
])
def test_no_guess_when_the_placement_is_unclear(old: str, new: str) -> None:
    assert find_loose("def a():\n  b()\n  c()\n", old, new) is None


def test_mixed_indentation_that_no_single_shift_explains_is_not_guessed() -> None:
    text = "a:\n    b\n\tc\n"
    assert find_loose(text, "a:\n  b\n  c", "a:\n  b\n  d") is None


def test_ambiguity_names_every_candidate() -> None:
    with pytest.raises(AmbiguousLooseMatch) as caught:
        find_loose("x = 1 \ny = 2\n  x = 1\n\tx = 1\n", "x = 1\n", "x = 3\n")
    assert caught.value.lines == [1, 3, 4]


def calls(*names: str) -> list[str]:
    detector = RepeatDetector()
    return [detector.warning(ToolCall(id=str(i), name="Read", arguments={"file_path": n})) for i, n in enumerate(names)]


def test_cycle_detector() -> None:
    assert [bool(w) for w in calls("a", "a", "a")] == [False, False, True]
    assert [bool(w) for w in calls("a", "b", "a", "b")] == [False, False, False, True]
    assert [bool(w) for w in calls("a", "b", "c", "a", "b", "c")] == [False] * 5 + [True]
    assert not any(calls("a", "b", "a", "c", "a", "b", "a", "c"))  # a period of 4: not flagged
    assert not any(calls("a", "b", "c", "b", "a"))


def test_a_hostile_file_costs_one_search_not_lines_times_old_string() -> None:
    text = "x\n" * 2_000_000
    assert find_loose(text, "  x\n" * 1000 + "y", "z") is None  # would be 2e9 line comparisons, done naively
    with pytest.raises(AmbiguousLooseMatch) as caught:
        find_loose(text, "  x\n  x", "z")
    assert caught.value.lines[:3] == [1, 2, 3] and len(caught.value.lines) == 21  # the first few are enough
