"""The statistics piexp reports: the unbiased pass@k estimator (eval and compare), and
the one confidence interval, the mean of some values and the half-width of its two-sided
95% Student t-interval (summarize over seeds, compare over tasks)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

# Two-sided 95% Student t quantiles for 1..30 degrees of freedom; the normal's 1.960 beyond.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)  # fmt: skip


def t975(degrees_of_freedom: int) -> float:
    return _T975[degrees_of_freedom - 1] if 1 <= degrees_of_freedom <= len(_T975) else 1.960


def mean_ci95(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its 95% t-interval (None for a single value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def share_ci95(share: float, n: int) -> float | None:
    """The half-width of `mean_ci95` for n values of 0 or 1 whose mean is `share` (a pass
    rate known only as its mean and count), without the values themselves."""
    if n < 2:
        return None
    variance = n * share * (1.0 - share) / (n - 1)
    return t975(n - 1) * math.sqrt(max(variance, 0.0)) / math.sqrt(n)


def difference_ci95(before: Sequence[float], after: Sequence[float]) -> tuple[float, float | None]:
    """mean(after) - mean(before) and the half-width of its 95% Welch t-interval (two
    independent samples; None when either has fewer than two values)."""
    difference = statistics.fmean(after) - statistics.fmean(before)
    if len(before) < 2 or len(after) < 2:
        return difference, None
    va, vb = statistics.variance(before) / len(before), statistics.variance(after) / len(after)
    if va + vb == 0.0:
        return difference, 0.0
    # Welch-Satterthwaite degrees of freedom, rounded down (the conservative side).
    df = (va + vb) ** 2 / (va**2 / (len(before) - 1) + vb**2 / (len(after) - 1))
    return difference, t975(max(1, int(df))) * math.sqrt(va + vb)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
