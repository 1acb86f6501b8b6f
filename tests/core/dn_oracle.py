"""An independent float64 oracle for the DN-MOPD core, written from the method's definition in plain Python
(no torch, two-pass statistics with math.fsum) rather than from the implementation's sufficient statistics.

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


def token_loss(log_ratio: float, advantage: float, eps_low=0.2, eps_high=0.2, dual_clip=None):
    """(loss, d loss / d logp) of one token of the clipped surrogate."""
    ratio = math.exp(log_ratio)
    unclipped = -ratio * advantage
    clipped_ratio = min(max(ratio, 1 - eps_low), 1 + eps_high)
    clipped = -clipped_ratio * advantage
    if unclipped >= clipped:
        loss, grad = unclipped, -ratio * advantage
    else:
        loss, grad = clipped, (-ratio * advantage if clipped_ratio == ratio else 0.0)
    if dual_clip is not None and advantage < 0 and loss > -dual_clip * advantage:
        loss, grad = -dual_clip * advantage, 0.0
    return loss, grad


def opd_loss(responses, num_responses=None, **clip):
    """responses: list of (log_ratios, advantages) over valid tokens. Returns (loss, grads per response)."""
    denominator = len(responses) if num_responses is None else num_responses
    total, grads = [], []
    for log_ratios, advantages in responses:
        n = max(len(log_ratios), 1)
        per_token = [token_loss(lr, a, **clip) for lr, a in zip(log_ratios, advantages, strict=True)]
        total.append(math.fsum(loss for loss, _ in per_token) / n)
        grads.append([g / n / denominator for _, g in per_token])
    return math.fsum(total) / denominator, grads
