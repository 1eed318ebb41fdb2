"""The paired comparison: intervals checked against cases computed by hand, the verdict in words, and the
same numbers in a real two-model report."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import pytest

from agent.evaluation.compare import clopper_pearson, compare, mcnemar_exact_p, paired_bootstrap
from agent.evaluation.runner import EvalConfig, EvalRun
from agent.evaluation.tasks import load_tasks
from tests.eval.conftest import make_task
from tests.eval.oracle import oracle_models, write_replay


def test_mcnemar_interval_for_a_known_case() -> None:
    """A resolves 7 tasks B does not, B none that A does not, 40 tasks.

    By hand: exact McNemar p = 2 · (1/2)^7 = 1/64. Clopper–Pearson for 7 of 7 disagreements won by A:
    lower bound θ with θ^7 = 0.025, upper 1. Difference = (7/40)(2θ − 1): [7/40 · (2 · 0.025^(1/7) − 1), 7/40].
    """
    c = compare("frognano", "gemma", [1.0] * 7 + [0.0] * 33, [0.0] * 40, samples=1)
    assert c.method == "exact McNemar" and (c.a_only, c.b_only, c.tasks) == (7, 0, 40)
    assert c.p_value == pytest.approx(1 / 64, rel=1e-12)
    assert c.difference == pytest.approx(7 / 40)
    assert c.low == pytest.approx(7 / 40 * (2 * 0.025 ** (1 / 7) - 1), abs=1e-9)  # +3.16 points
    assert c.high == pytest.approx(7 / 40, abs=1e-9)
    assert c.verdict == (
        "frognano resolved 7 more of 40 tasks than gemma (+17.5 points); 95 % CI +3.2 to +17.5 points, "
        "exact McNemar, p = 0.0156: frognano is better on tasks like these."
    )


def exact_tail_at_least(x: int, n: int, p: Fraction) -> Fraction:
    return sum((Fraction(math.comb(n, k)) * p**k * (1 - p) ** (n - k) for k in range(x, n + 1)), Fraction(0))


@pytest.mark.parametrize(("x", "n"), [(3, 10), (1, 2), (12, 30), (0, 5), (5, 5)])
def test_clopper_pearson_bounds_meet_their_definition(x: int, n: int) -> None:
    """Each bound is where the exact binomial tail (summed in fractions here) equals 2.5 %."""
    low, high = clopper_pearson(x, n)
    if x > 0:
        assert float(exact_tail_at_least(x, n, Fraction(low))) == pytest.approx(0.025, abs=1e-9)
    else:
        assert low == 0.0
    if x < n:
        assert float(1 - exact_tail_at_least(x + 1, n, Fraction(high))) == pytest.approx(0.025, abs=1e-9)
    else:
        assert high == 1.0
    # A published value (R's binom.test(3, 10)): 0.06673951 to 0.6524529.
    if (x, n) == (3, 10):
        assert (low, high) == pytest.approx((0.06673951, 0.6524529), abs=1e-7)


def test_mcnemar_p_values() -> None:
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(3, 3) == 1.0
    # 1 vs 6 disagreements: 2 · P(X <= 1), X ~ Bin(7, 1/2) = 2 · 8/128.
    assert mcnemar_exact_p(1, 6) == pytest.approx(16 / 128)


def test_verdicts_in_words() -> None:
    tie = compare("A", "B", [1, 0, 1, 0] * 10, [0, 1, 1, 0] * 10, samples=1)
    assert tie.verdict.startswith("A and B resolved the same number of the 40 tasks (20); 95 % CI −")
    assert tie.verdict.endswith("not enough tasks to tell.")
    worse = compare("A", "B", [0.0] * 40, [1.0] * 3 + [0.0] * 37, samples=1)
    assert worse.verdict.startswith("A resolved 3 fewer of 40 tasks than B (−7.5 points)")
    same = compare("A", "B", [1.0] * 20 + [0.0] * 20, [1.0] * 20 + [0.0] * 20, samples=1)
    assert "they never disagree on these 40 tasks" in same.verdict
    clear_loss = compare("A", "B", [0.0] * 30, [1.0] * 12 + [0.0] * 18, samples=1)
    assert clear_loss.high < 0 and clear_loss.verdict.endswith("B is better on tasks like these.")
    assert compare("A", "B", [], [], samples=1).verdict == "A and B have no finished task in common yet."


def test_paired_bootstrap() -> None:
    # Every task the same difference: the interval is that difference, nothing else.
    assert paired_bootstrap([0.5] * 12) == pytest.approx((0.5, 0.5, 0.5))
    # Many tasks: close to the normal interval mean ± 1.96 · sd / sqrt(n).
    values = [1.0, 0.0, -1.0, 0.5, 0.0, 0.0, 1.0, -0.5] * 50
    mean, low, high = paired_bootstrap(values)
    n = len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    assert mean == pytest.approx(sum(values) / n)
    assert low == pytest.approx(mean - 1.96 * sd / math.sqrt(n), abs=0.01)
    assert high == pytest.approx(mean + 1.96 * sd / math.sqrt(n), abs=0.01)
    assert paired_bootstrap(values) == paired_bootstrap(values)  # the same report every time
    several = compare("A", "B", [1.0, 2 / 3, 0.0], [1 / 3, 2 / 3, 0.0], samples=3)
    assert several.method == "paired bootstrap" and several.verdict.startswith(
        "A resolved 0.7 more of 3 tasks than B (+22.2 points, mean of 3 samples)")


def test_two_models_in_one_report(tmp_path: Path) -> None:
    """Oracle vs a model that does nothing on 3 tasks: 3 disagreements, all to the oracle. By hand:
    p = 2 · (1/2)^3 = 0.25; CI lower (3/3)(2 · 0.025^(1/3) − 1) = −41.5 points, upper +100: can't tell."""
    root = tmp_path / "tasks"
    for name in ("t1", "t2", "t3"):
        make_task(root, name)
    oracle = oracle_models(root, tmp_path / "oracle")
    idle = f"replay:{write_replay(tmp_path / 'idle' / 'idle.jsonl', [])}"
    EvalRun(load_tasks(root), [oracle, idle], EvalConfig(out=tmp_path / "out", jobs=2)).run()
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    (c,) = report["comparisons"]
    assert (c["a"], c["b"], c["tasks"], c["a_only"], c["b_only"]) == ("replay:oracle/{task}.jsonl", "replay:idle/idle.jsonl", 3, 3, 0)
    assert c["p_value"] == pytest.approx(0.25)
    assert c["low"] == pytest.approx(2 * 0.025 ** (1 / 3) - 1, abs=1e-9) and c["high"] == pytest.approx(1.0)
    md = (tmp_path / "out" / "report.md").read_text()
    assert ("replay:oracle/{task}.jsonl resolved 3 more of 3 tasks than replay:idle/idle.jsonl (+100.0 points); "
            "95 % CI −41.5 to +100.0 points, exact McNemar, p = 0.25: not enough tasks to tell.") in md
    assert "| t2 | resolved | no patch |" in md
    summary = {m["label"]: m for m in report["models"]}
    oracle_summary = summary["replay:oracle/{task}.jsonl"]
    assert oracle_summary["resolved"] == 3
    assert oracle_summary["wall_per_resolved"] == pytest.approx(oracle_summary["wall_s"] / 3, abs=0.1)
    assert oracle_summary["tokens_per_resolved"] == pytest.approx(
        (oracle_summary["evaluated_tokens"] + oracle_summary["completion_tokens"]) / 3, abs=0.1)
    assert summary["replay:idle/idle.jsonl"]["tokens_per_resolved"] is None
