"""The DN-MOPD algorithm core: pure functions and small stateful pieces, no I/O, no process groups.

statistics   the (4, D) per-domain statistics of r = log p_teacher - log p_rollout, population std
normalizer   DomainNormalizer: w_d = clip(sigma_all / sigma_d) with multipliers dn / observe / fixed / frozen
routing      which teacher's log-probs are a response's target (rules label, single, pool, dynamic)
advantages   GRPO group advantages, the dynamic-sampling filter, the annealed injection schedule

The statistics are measured by the kernel op ``dnmopd.kernels.domain_stats`` and the OPD loss by
``dnmopd.kernels.fused_opd_loss``; the trainer sums the statistics over data-parallel ranks.
"""

from dnmopd.core.advantages import (
    DynamicSamplingFilter,
    grpo_advantages,
    inject_constant_advantages,
    injection_constant,
    select_injection,
)
from dnmopd.core.normalizer import (
    DEFAULT_BOUNDS,
    MULTIPLIER_MODES,
    DNDiagnostics,
    DomainDiagnostics,
    DomainNormalizer,
)
from dnmopd.core.routing import ROUTING_RULES, SENTINEL, Router, RoutingConfig, ScoreError
from dnmopd.core.statistics import STAT_ROWS, population_std

__all__ = [
    "DEFAULT_BOUNDS", "MULTIPLIER_MODES", "ROUTING_RULES", "SENTINEL", "STAT_ROWS",
    "DNDiagnostics", "DomainDiagnostics", "DomainNormalizer", "DynamicSamplingFilter", "Router",
    "RoutingConfig", "ScoreError",
    "grpo_advantages", "inject_constant_advantages", "injection_constant", "population_std",
    "select_injection",
]
