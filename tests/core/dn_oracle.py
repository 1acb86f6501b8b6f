"""An independent float64 oracle for the DN multipliers, written from the method's definition in plain Python
(no torch, two-pass statistics with math.fsum) rather than from the implementation's sufficient statistics.
(The loss's float64 reference is tests/kernels/kernel_reference.py.)

Responses are (domain, [r_1, ..., r_n]) with the valid tokens only.
"""

from __future__ import annotations

import math


def population_std(values: list[float]) -> float:
    """Two-pass population std; 0 for fewer than two values or a spread below float64 cancellation error."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = math.fsum(values) / n
    variance = math.fsum((v - mean) ** 2 for v in values) / n
    mean_sq = math.fsum(v * v for v in values) / n
    if variance <= 1e-12 * mean_sq:
        return 0.0
    return math.sqrt(variance)


def multipliers(responses, lower=0.25, upper=4.0):
    """{domain: (std, raw, factor)} for every domain present, and sigma_all."""
    pooled = [v for _, values in responses for v in values]
    sigma_all = population_std(pooled)
    result = {}
    for domain in sorted({d for d, _ in responses}):
        values = [v for d, vs in responses if d == domain for v in vs]
        sigma_d = population_std(values)
        raw = sigma_all / sigma_d if sigma_d > 0 and sigma_all > 0 else 1.0
        result[domain] = (sigma_d, raw, min(upper, max(lower, raw)))
    return result, sigma_all

