"""Hunks: difflib's output where difflib is affordable, a correct diff at a bounded cost beyond."""

from __future__ import annotations

import difflib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agent.diffs as diffs
from agent.diffs import apply_hunks, make_hunks, matching_blocks, split_lines, unified_diff


def difflib_groups(old: str, new: str) -> list[list[tuple[str, int, int, int, int]]]:
    a, b = split_lines(old), split_lines(new)
    return list(difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_grouped_opcodes(3))


def source_like(lines: int, seed: int) -> list[str]:
    """Code-shaped text: mostly distinct lines, blank lines and a few common ones repeating."""
    rng = random.Random(seed)
    common = ["\n", "    return None\n", "        pass\n", "    }\n", "else:\n"]
    return [rng.choice(common) if rng.random() < 0.3 else f"    value_{rng.randrange(10**6)} = f({i})\n" for i in range(lines)]


def check(old: str, new: str) -> None:
    hunks = make_hunks(old, new)
    assert apply_hunks(old, hunks, set(range(len(hunks)))) == new
    assert apply_hunks(old, hunks, set()) == old
    blocks = matching_blocks(split_lines(old), split_lines(new))
    a, b = split_lines(old), split_lines(new)
    assert blocks[-1] == (len(a), len(b), 0)
    for (i, j, n), (i2, j2, _) in zip(blocks, blocks[1:]):
        assert a[i : i + n] == b[j : j + n] and i + n <= i2 and j + n <= j2


@pytest.mark.parametrize("seed", range(6))
def test_same_hunks_as_difflib_on_source_sized_files(seed: int) -> None:
    lines = source_like(2_000 + 4_000 * (seed % 3), seed)  # some within the budget, some past it
    rng = random.Random(seed)
    new = list(lines)
    for _ in range(1 + seed % 3):
        at = rng.randrange(len(new))
        new[at : at + rng.randrange(4)] = [f"    edited_{rng.random()}\n"] * rng.randrange(1, 4)
    old_text, new_text = "".join(lines), "".join(new)
    expected = difflib_groups(old_text, new_text)
    assert [[tuple(op) for op in group] for group in diffs._Matched(split_lines(old_text), split_lines(new_text)).get_grouped_opcodes(3)] == expected


def test_repeated_lines_are_diffed_precisely_at_a_bounded_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    shapes = ["    pass\n", "\n", "    return None\n", "}\n", "    x += 1\n"]
    lines = [shapes[i % 5] for i in range(40_000)]
    new = list(lines)
    new[20_000] = "    marker\n"
    calls: list[int] = []
    real = difflib.SequenceMatcher.find_longest_match

    def counted(self, *args):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(self, *args)

    monkeypatch.setattr(difflib.SequenceMatcher, "find_longest_match", counted)
    hunks = make_hunks("".join(lines), "".join(new))
    assert [h.header for h in hunks] == ["@@ -19998,7 +19998,7 @@"]
    assert hunks[0].lines[3:5] == ["-    pass", "+    marker"]
    assert len(calls) < 10  # difflib only saw the changed middle, not 40,000 x 8,000 candidates


def test_scattered_changes_in_repeated_lines_still_make_a_correct_diff() -> None:
    shapes = ["    pass\n", "\n", "    return None\n", "}\n", "    x += 1\n"]
    lines = [shapes[i % 5] for i in range(40_000)]
    new = list(lines)
    for i in range(0, 40_000, 400):
        new[i + 1] = f"    changed_{i}\n"
    check("".join(lines), "".join(new))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["a\n", "b\n", "c\n", "\n", "d"]), max_size=40),
    st.lists(st.sampled_from(["a\n", "b\n", "c\n", "\n", "e\n"]), max_size=40),
)
def test_the_bounded_paths_always_make_a_correct_diff(old: list[str], new: list[str]) -> None:
    budget = diffs.DIFFLIB_BUDGET
    try:
        for diffs.DIFFLIB_BUDGET in (budget, 0):  # difflib, then the head/tail + patience path
            check("".join(old), "".join(new))
    finally:
        diffs.DIFFLIB_BUDGET = budget


def test_lines_split_only_at_newlines() -> None:
    old = "a\x0cb\nc\u2028d\n"
    new = "a\x0cb\nc\u2028e\n"
    assert split_lines(old) == ["a\x0cb\n", "c\u2028d\n"]
    diff = unified_diff("f.txt", old, new)
    assert diff.endswith("@@ -1,2 +1,2 @@\n a\x0cb\n-c\u2028d\n+c\u2028e\n")  # two lines, as git counts them
