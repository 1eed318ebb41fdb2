"""Two models on the same tasks: the paired difference in resolved rate, its 95 % interval, a verdict in words.

One sample per task: the exact McNemar test. Only the tasks where the two disagree carry information;
given d of them, A won a of those with probability θ, so the difference is (d / n)(2θ − 1) and its
interval comes from the exact (Clopper–Pearson) interval for θ — conditional on d, as McNemar's test is.
Several samples per task: each task's difference in pass@1 (resolved fraction of its samples), and a paired
bootstrap over tasks (10,000 resamples, fixed seed, so the report is the same every time).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 20260101
# Within this many points either way, an interval that holds 0 says "no real difference"; wider, "can't tell".
SAME_WITHIN = 0.05


class Comparison(BaseModel):
    a: str
    b: str
    tasks: int  # tasks both models finished (every sample)
    samples: int
    a_resolved: float  # resolved tasks (mean over samples)
    b_resolved: float
    difference: float  # (a_resolved - b_resolved) / tasks
    low: float
    high: float
    method: Literal["exact McNemar", "paired bootstrap", "none"]
    p_value: float | None = None  # exact McNemar, two-sided
    a_only: int = 0  # one sample: tasks only A resolved
    b_only: int = 0
    verdict: str


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (no overflow at large n)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
        for i in range(k + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def clopper_pearson(x: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Exact interval for a binomial proportion from x successes in n trials (bisection on the binomial tails)."""
    if n <= 0:
        return 0.0, 1.0
    alpha = 1.0 - confidence
    # Lower: the p where P(X >= x) = alpha/2; upper: the p where P(X <= x) = alpha/2.
    low = 0.0 if x == 0 else _solve(lambda p: 1.0 - binomial_cdf(x - 1, n, p) - alpha / 2)
    high = 1.0 if x == n else _solve(lambda p: alpha / 2 - binomial_cdf(x, n, p))
    return low, high


def _solve(f, lo: float = 0.0, hi: float = 1.0) -> float:  # type: ignore[no-untyped-def]
    """The root of an increasing f on [lo, hi], by bisection to float precision."""
    for _ in range(200):
        mid = (lo + hi) / 2
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return (lo + hi) / 2


def mcnemar_exact_p(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value: the binomial test of a_only out of the disagreements at 1/2."""
    d = a_only + b_only
    if d == 0:
        return 1.0
    return min(1.0, 2.0 * binomial_cdf(min(a_only, b_only), d, 0.5))


def paired_mcnemar(a: Sequence[bool], b: Sequence[bool]) -> tuple[float, float, float, float, int, int]:
    """(difference, low, high, p, a_only, b_only) for one resolved/not outcome per task and model."""
    n = len(a)
    a_only = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    b_only = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    d = a_only + b_only
    if n == 0:
        return 0.0, 0.0, 0.0, 1.0, 0, 0
    difference = (a_only - b_only) / n
    theta_low, theta_high = clopper_pearson(a_only, d)
    scale = d / n
    low, high = (scale * (2 * theta_low - 1), scale * (2 * theta_high - 1)) if d else (0.0, 0.0)
    return difference, low, high, mcnemar_exact_p(a_only, b_only), a_only, b_only


def paired_bootstrap(differences: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES,
                     seed: int = BOOTSTRAP_SEED) -> tuple[float, float, float]:
    """(mean, low, high): the percentile interval of the mean per-task difference, tasks resampled."""
    values = np.asarray(differences, dtype=float)
    if values.size == 0:
        return 0.0, 0.0, 0.0
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, values.size, size=(resamples, values.size))
    means = values[picks].mean(axis=1)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(values.mean()), float(low), float(high)


def compare(a: str, b: str, a_rates: Sequence[float], b_rates: Sequence[float], samples: int) -> Comparison:
    """A and B on the same tasks: per task, the fraction of samples each resolved (0 or 1 with one sample)."""
    n = len(a_rates)
    a_resolved, b_resolved = float(sum(a_rates)), float(sum(b_rates))
    p_value = None
    a_only = b_only = 0
    if n == 0:
        method: Literal["exact McNemar", "paired bootstrap", "none"] = "none"
        difference = low = high = 0.0
    elif samples == 1:
        method = "exact McNemar"
        difference, low, high, p_value, a_only, b_only = paired_mcnemar(
            [r >= 1 for r in a_rates], [r >= 1 for r in b_rates]
        )
    else:
        method = "paired bootstrap"
        difference, low, high = paired_bootstrap([x - y for x, y in zip(a_rates, b_rates, strict=True)])
    comparison = Comparison(
        a=a, b=b, tasks=n, samples=samples, a_resolved=a_resolved, b_resolved=b_resolved, difference=difference,
        low=low, high=high, method=method, p_value=p_value, a_only=a_only, b_only=b_only, verdict="",
    )
    return comparison.model_copy(update={"verdict": verdict(comparison)})


def verdict(c: Comparison) -> str:
    """One line: how many more tasks, the interval in points, and what that means."""
    if c.tasks == 0:
        return f"{c.a} and {c.b} have no finished task in common yet."
    more = c.a_resolved - c.b_resolved
    average = f", mean of {c.samples} samples" if c.samples > 1 else ""
    if abs(more) < 1e-9:
        head = f"{c.a} and {c.b} resolved the same number of the {c.tasks} tasks ({_count(c.a_resolved)}{average})"
    else:
        word = "more" if more > 0 else "fewer"
        head = (f"{c.a} resolved {_count(abs(more))} {word} of {c.tasks} tasks than {c.b} "
                f"({_points(c.difference)} points{average})")
    detail = f"95 % CI {_points(c.low)} to {_points(c.high)} points, {c.method}"
    if c.p_value is not None:
        detail += f", p = {c.p_value:.3g}"
    if c.low > 0:
        meaning = f"{c.a} is better on tasks like these"
    elif c.high < 0:
        meaning = f"{c.b} is better on tasks like these"
    elif c.method == "exact McNemar" and c.a_only + c.b_only == 0:
        meaning = f"they never disagree on these {c.tasks} tasks; not enough tasks to tell a small difference"
    elif max(-c.low, c.high) <= SAME_WITHIN:
        meaning = f"no real difference (within {SAME_WITHIN * 100:.0f} points)"
    else:
        meaning = "not enough tasks to tell"
    return f"{head}; {detail}: {meaning}."


def _points(fraction: float) -> str:
    value = fraction * 100
    text = f"{value:+.1f}" if abs(value) >= 0.05 else "0.0"
    return text.replace("-", "−")


def _count(value: float) -> str:
    return str(round(value)) if abs(value - round(value)) < 1e-9 else f"{value:.1f}"
