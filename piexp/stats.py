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


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
