"""The DN-MOPD algorithm core: pure tensor functions, no I/O, no process-group creation.

statistics   per-domain float64 sufficient statistics of r = log p_teacher - log p_rollout, reduction
normalizer   DomainNormalizer: w_d = clip(sigma_all / sigma_d) in modes dn / observe / fixed / frozen
routing      which teacher's log-probs are a response's target (label, single, pool, dynamic)
advantages   reverse-KL advantages and their scaling, GRPO group advantages, injection schedule
losses       clipped OPD loss with response-mean reduction, SFT cross-entropy
"""

from dnmopd.core.advantages import (
    DynamicSamplingFilter,
    grpo_advantages,
    inject_constant_advantages,
    injection_constant,
    reverse_kl_advantages,
    scale_advantages,
    scale_advantages_batched,
    select_injection,
)
from dnmopd.core.losses import clipped_opd_loss, clipped_opd_loss_batched, clipped_surrogate, sft_loss
from dnmopd.core.normalizer import (
    DEFAULT_BOUNDS,
    MODES,
    DNDiagnostics,
    DomainDiagnostics,
    DomainNormalizer,
    domain_multipliers,
)
from dnmopd.core.routing import SENTINEL, Router, RoutingConfig, ScoreError
from dnmopd.core.statistics import (
    STAT_ROWS,
    all_reduce_statistics,
    batch_statistics,
    list_statistics,
    merge_statistics,
    population_std,
)

__all__ = [
    "DEFAULT_BOUNDS", "MODES", "SENTINEL", "STAT_ROWS",
    "DNDiagnostics", "DomainDiagnostics", "DomainNormalizer", "DynamicSamplingFilter", "Router",
    "RoutingConfig", "ScoreError",
    "all_reduce_statistics", "batch_statistics", "clipped_opd_loss", "clipped_opd_loss_batched",
    "clipped_surrogate", "domain_multipliers", "grpo_advantages",
    "inject_constant_advantages", "injection_constant", "list_statistics", "merge_statistics",
    "population_std", "reverse_kl_advantages", "scale_advantages", "scale_advantages_batched",
    "select_injection", "sft_loss",
]
