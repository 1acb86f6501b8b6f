"""Per-domain sufficient statistics of the DN scale statistic r = log p_teacher - log p_rollout.

The unit of exchange is a float64 tensor of shape (4, D): one column per domain, rows
(responses, tokens, sum r, sum r^2). The trainer measures it on each data-parallel rank with the kernel op
``dnmopd.kernels.domain_stats`` and sums it over the ranks; sums of these tensors are exact to float64
rounding, so the statistics of shards summed equal the statistics of the whole batch.
"""

from __future__ import annotations

import math

STAT_ROWS = ("responses", "tokens", "sum", "sumsq")
RESPONSES, TOKENS, SUM, SUMSQ = range(4)

# A spread below 1e-6 of the RMS is indistinguishable from float64 cancellation error: treat it as constant.
ZERO_VARIANCE_RTOL = 1e-12


def population_std(count: float, total: float, total_sq: float) -> float:
    """Population std (divide by N) from sufficient statistics; 0 when fewer than two observations or when
    the variance is below float64 cancellation error."""
    if count < 2:
        return 0.0
    mean_sq = total_sq / count
    variance = mean_sq - (total / count) ** 2
    if variance <= ZERO_VARIANCE_RTOL * mean_sq:
        return 0.0
    return math.sqrt(variance)
