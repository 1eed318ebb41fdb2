"""Three starter tasks (evals/starter), each solved in a scripted session with the thinking a reasoning model
writes before each call. Written for `bench.reasoning`: the calls and answers are the same with reasoning on
and off; only the `<think>` part goes. The reasoning is ours, written in the style of a Qwen3-class model's
(plans, checks, doubts), 60-130 words a turn — a modest amount: real thinking models often write more.
"""

from __future__ import annotations

from dataclasses import dataclass


def call(name: str, **params: object) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


@dataclass(frozen=True)
class ScriptedTurn:
    reasoning: str
    text: str


@dataclass(frozen=True)
class ScriptedTask:
    name: str  # a folder of evals/starter
    turns: tuple[ScriptedTurn, ...]


TEST_CMD = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -q -p no:cacheprovider tests"

MERGE = ScriptedTask("merge-intervals", (
    ScriptedTurn(
        "The user says merge() only merges neighbours in the order given, and that touching intervals like (1, 2) "
        "and (2, 3) should merge too. So there are probably two problems: the input is not sorted before the loop, "
        "and the overlap test uses a strict comparison. I should not guess, though. Let me read intervals.py first "
        "and see how the loop is written, then look at the tests to see what they expect for empty input and for "
        "intervals that are already sorted.",
        "Let me look at the implementation.\n" + call("Read", file_path="intervals.py")),
    ScriptedTurn(
        "The loop walks the intervals in the order given and compares start < out[-1][1]. Two fixes: iterate over "
        "sorted(intervals) so that (1, 3) and (2, 4) end up next to each other even when (5, 7) comes first, and "
        "use <= so that an interval starting exactly where the last one ends is merged. sorted() on tuples sorts by "
        "start and then by end, which is fine here. The empty list still returns an empty list. I will change both "
        "lines in one Edit, keeping the indentation as it is.",
        call("Edit", file_path="intervals.py",
             old_string="    for start, end in intervals:\n        if out and start < out[-1][1]:",
             new_string="    for start, end in sorted(intervals):\n        if out and start <= out[-1][1]:")),
    ScriptedTurn(
        "Now run the tests to check nothing else broke. The existing tests cover a sorted overlap and the empty "
        "case; the issue's two cases are not in the repository, so after the run I could also check them by hand "
        "with a one-line Python command.",
        call("Bash", command=TEST_CMD)),
    ScriptedTurn(
        "Tests pass. Let me check the two cases from the issue directly: [(5, 7), (1, 3), (2, 4)] should give "
        "[(1, 4), (5, 7)] and [(1, 2), (2, 3)] should give [(1, 3)].",
        call("Bash", command="python -c 'import intervals; print(intervals.merge([(5, 7), (1, 3), (2, 4)]), "
                             "intervals.merge([(1, 2), (2, 3)]))'")),
    ScriptedTurn(
        "Both are right. I am done: summarise the change.",
        "merge() now sorts the intervals by start before merging and merges intervals that touch (start <= end "
        "of the previous one). The tests pass and both cases from the issue give the expected result."),
))

ROMAN = ScriptedTask("roman-numerals", (
    ScriptedTurn(
        "to_roman writes 4 as IIII, so it only knows the seven basic symbols and never uses subtractive pairs. The "
        "usual way to fix this is to add the six subtractive values (900 CM, 400 CD, 90 XC, 40 XL, 9 IX, 4 IV) to "
        "the table in descending order, and the greedy loop then does the rest. Let me read roman.py to see the "
        "table and the loop.",
        call("Read", file_path="roman.py")),
    ScriptedTurn(
        "The table is _VALUES = [(1000, 'M'), (500, 'D'), ...]. The loop is greedy over that list, so I only need to "
        "insert the subtractive pairs at the right places, keeping the list sorted by value from large to small. "
        "1994 would then be M (1000), CM (900), XC (90), IV (4): MCMXCIV, as the issue says. The range check stays.",
        call("Edit", file_path="roman.py",
             old_string='_VALUES = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]',
             new_string='_VALUES = [\n    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),\n'
                        '    (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),\n]')),
    ScriptedTurn(
        "Run the tests. test_range probably round-trips or checks lengths; if it counted characters it might have "
        "relied on the old additive form, so I should look at a failure carefully rather than change the test.",
        call("Bash", command=TEST_CMD)),
    ScriptedTurn(
        "All pass. Quick manual check of the examples from the issue.",
        call("Bash", command="python -c 'import roman; print([roman.to_roman(n) for n in (4, 9, 40, 90, 400, 900, 1994)])'")),
    ScriptedTurn(
        "Output matches: IV IX XL XC CD CM MCMXCIV.",
        "to_roman now uses subtractive notation: the value table includes CM, CD, XC, XL, IX and IV, so 1994 is "
        "MCMXCIV. The tests pass."),
))

UNITS = ScriptedTask("temperature-convert", (
    ScriptedTurn(
        "convert(212, 'F', 'C') gives 194.22. 212 - 32 * 5 / 9 = 212 - 17.78 = 194.22, so the formula is missing "
        "parentheses: it should be (value - 32) * 5 / 9. Everything going from F to anything else goes through "
        "to_celsius, which explains F to K too. Let me read units.py to confirm where the formula is.",
        call("Read", file_path="units.py")),
    ScriptedTurn(
        "Confirmed: to_celsius returns value - 32 * 5 / 9 for F. from_celsius uses value * 9 / 5 + 32, which is "
        "right. Fix the one line with an Edit; the rounding in convert() stays as it is.",
        call("Edit", file_path="units.py", old_string="        return value - 32 * 5 / 9",
             new_string="        return (value - 32) * 5 / 9")),
    ScriptedTurn(
        "These tests use unittest, not pytest, according to the layout (tests/__init__.py is there). Run them with "
        "unittest discovery from the repository root.",
        call("Bash", command="python -m unittest discover -s tests -t .")),
    ScriptedTurn(
        "They pass. Check the issue's example and F to K by hand: 212 F is 100 C and 373.15 K.",
        call("Bash", command="python -c 'import units; print(units.convert(212, \"F\", \"C\"), units.convert(212, \"F\", \"K\"))'")),
    ScriptedTurn(
        "100.0 and 373.15. Done.",
        "Fixed the Fahrenheit-to-Celsius formula in units.to_celsius: (value - 32) * 5 / 9. convert(212, 'F', 'C') "
        "is now 100.0 and F to K is right too. The tests pass."),
))

TASKS = (MERGE, ROMAN, UNITS)


def forced_turns(task: ScriptedTask, reasoning: bool) -> list[str]:
    """What the model 'writes' each turn: after the generation prompt's `<think>\\n` when reasoning is on
    (so the reasoning, then `</think>`), after an empty, closed think block when it is off."""
    if reasoning:
        return [f"{t.reasoning}\n</think>\n\n{t.text}" for t in task.turns]
    return [t.text for t in task.turns]
