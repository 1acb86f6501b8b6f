"""The paper's paired bootstrap of a difference between two models (reference-behavior section 7).

For one contrast (a set of suites): a fresh ``numpy.random.default_rng(20260923)``; for each suite in the
protocol's order, question ids sorted, ``rng.integers(0, Q, size=(B, Q))`` indices shared by both models,
replicate = 100 * (mean_a - mean_b) over the drawn questions; the contrast's replicates are the equal-weight
mean over its suites, its point the mean of the suite differences, its interval the 2.5/97.5 percentiles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dnmopd.eval.protocol import BOOTSTRAP_B, BOOTSTRAP_SEED, DOMAINS, SIX, SUITES


@dataclass(frozen=True, slots=True)
class Contrast:
    name: str
    suites: tuple[str, ...]
    delta: float
    low: float
    high: float
    replicates: np.ndarray


def paired_replicates(a: dict[str, float], b: dict[str, float], rng: np.random.Generator,
                      replicates: int = BOOTSTRAP_B) -> tuple[float, np.ndarray]:
    """Point difference (points) and bootstrap replicates of one suite: questions resampled alike for a and b."""
    if set(a) != set(b):
        only = sorted(set(a) ^ set(b))[:5]
        raise ValueError(f"the two models answered different questions (e.g. {only}); a paired contrast needs the "
                         "same question ids")
    ids = sorted(a)
    va, vb = np.array([a[i] for i in ids]), np.array([b[i] for i in ids])
    idx = rng.integers(0, len(ids), size=(replicates, len(ids)))
    return 100 * (va.mean() - vb.mean()), 100 * (va[idx].mean(axis=1) - vb[idx].mean(axis=1))


def contrast(name: str, suites: Sequence[str], a: dict[str, dict[str, float]], b: dict[str, dict[str, float]],
             replicates: int = BOOTSTRAP_B, seed: int = BOOTSTRAP_SEED) -> Contrast:
    """a - b averaged over ``suites`` (question scores per suite), with its paired bootstrap interval."""
    ordered = [s for s in SUITES if s in suites]
    rng = np.random.default_rng(seed)
    point, draws = 0.0, np.zeros(replicates)
    for suite in ordered:
        delta, boot = paired_replicates(a[suite], b[suite], rng, replicates)
        point += delta / len(ordered)
        draws += boot / len(ordered)
    low, high = (float(v) for v in np.percentile(draws, [2.5, 97.5]))
    return Contrast(name, tuple(ordered), float(point), low, high, draws)


def compare(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]],
            replicates: int = BOOTSTRAP_B) -> list[Contrast]:
    """Per suite (protocol order), per domain and for the Total, over the suites both models have."""
    shared = [s for s in SUITES if s in a and s in b]
    out = [contrast(s, [s], a, b, replicates) for s in shared]
    out += [contrast(d, members, a, b, replicates) for d, members in DOMAINS.items()
            if all(s in shared for s in members)]
    if all(s in shared for s in SIX):
        out.append(contrast("total", SIX, a, b, replicates))
    return out
