"""Domain normalization: w_d = clip(sigma_all / sigma_d, lower, upper).

sigma_d is the population std of r = log p_teacher - log p_rollout over every valid token of domain d in
the (global) rollout batch; sigma_all the population std over all valid tokens of the batch pooled across
domains. A factor is degenerate (raw factor 1) when either std is 0, which includes resting on fewer than
two tokens. Modes decide what is applied; the statistic is measured and reported in every mode:

    dn      the measured clip(sigma_all / sigma_d), re-measured every batch (DN-MOPD)
    observe 1.0 (Label routing, multipliers recorded only)
    fixed   a constant per domain (fixed-weight controls)
    frozen  per domain, the factor of the first batch in which that domain was measurable
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

import torch

from dnmopd.core.statistics import (
    RESPONSES,
    SUM,
    SUMSQ,
    TOKENS,
    Sync,
    batch_statistics,
    list_statistics,
    population_std,
    reduce_statistics,
    validate_sync,
)

DEFAULT_BOUNDS = (0.25, 4.0)
MODES = ("dn", "observe", "fixed", "frozen")


@dataclass(frozen=True)
class DomainDiagnostics:
    responses: int
    tokens: int
    std: float
    raw_factor: float
    factor: float
    clipped: bool
    applied: float


@dataclass(frozen=True)
class DNDiagnostics:
    mode: str
    step: int
    global_std: float
    global_tokens: int
    domains: dict[str, DomainDiagnostics]

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "step": self.step,
            "global_std": self.global_std,
            "global_tokens": self.global_tokens,
            "domains": {d: asdict(diag) for d, diag in self.domains.items()},
        }

    def to_metrics(self, prefix: str = "dn") -> dict[str, float]:
        metrics = {f"{prefix}/global_std": self.global_std, f"{prefix}/global_tokens": float(self.global_tokens)}
        for domain, diag in self.domains.items():
            for key in ("tokens", "std", "raw_factor", "factor", "applied", "clipped"):
                metrics[f"{prefix}/{domain}/{key}"] = float(getattr(diag, key))
        return metrics


def validate_bounds(bounds: Sequence[float]) -> tuple[float, float]:
    if len(bounds) != 2:
        raise ValueError(f"bounds must be (lower, upper), got {bounds!r}")
    lower, upper = (float(b) for b in bounds)
    if math.isnan(lower) or math.isnan(upper) or not 0.0 <= lower <= upper:
        raise ValueError(f"bounds must satisfy 0 <= lower <= upper (upper may be inf), got {bounds!r}")
    return lower, upper


class DomainNormalizer:
    """Per-domain advantage multipliers from per-batch log-ratio statistics.

    domains: the registered domain names, in a fixed order (required for the batched API and for any
        cross-rank reduction, since every rank must lay out its statistics identically).
    mode: one of MODES.
    bounds: (lower, upper) clip bounds; (0, inf) disables clipping, (1, 1) forces 1.
    fixed: constant per domain, required for and only allowed with mode "fixed".
    sync: how statistics are reduced across data-parallel ranks before the multipliers are computed: None or
        False (local), True (default process group), a ProcessGroup, or a callable(local) -> global.
    """

    def __init__(
        self,
        domains: Sequence[str] | None = None,
        *,
        mode: str = "dn",
        bounds: Sequence[float] = DEFAULT_BOUNDS,
        fixed: Mapping[str, float] | None = None,
        sync: Sync = None,
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.lower, self.upper = validate_bounds(bounds)
        if domains is not None:
            domains = tuple(domains)
            if not domains:
                raise ValueError("domains must not be empty")
            if len(set(domains)) != len(domains):
                raise ValueError(f"domains must be unique, got {list(domains)}")
            if not all(isinstance(d, str) and d for d in domains):
                raise ValueError(f"domains must be non-empty strings, got {list(domains)}")
        validate_sync(sync)
        if sync not in (None, False) and domains is None:
            raise ValueError("a cross-rank sync needs explicit domains (the same order on every rank)")
        if mode == "fixed":
            if not fixed:
                raise ValueError("mode 'fixed' needs a non-empty `fixed` mapping of domain -> multiplier")
            for domain, value in fixed.items():
                if not self.lower <= float(value) <= self.upper:
                    raise ValueError(
                        f"fixed multiplier {domain}={value} lies outside bounds [{self.lower}, {self.upper}]"
                    )
            missing = [d for d in domains or () if d not in fixed]
            if missing:
                raise ValueError(f"fixed multipliers missing for registered domains {missing}")
            fixed = {d: float(v) for d, v in fixed.items()}
        elif fixed is not None:
            raise ValueError(f"`fixed` multipliers are only allowed with mode 'fixed', not {mode!r}")
        self.mode = mode
        self._domains = domains
        self._fixed = fixed
        self._sync = sync
        self.step = 0
        self._frozen: dict[str, float] = {}
        self._frozen_step: dict[str, int] = {}

    @property
    def domains(self) -> tuple[str, ...] | None:
        return self._domains

    @property
    def frozen(self) -> dict[str, float]:
        return dict(self._frozen)

    # ---------------------------------------------------------------- public API
    def multipliers(self, pairs: Iterable[tuple[str, torch.Tensor]]) -> tuple[dict[str, float], DNDiagnostics]:
        """Multipliers from ragged (domain, valid-token log-ratios) pairs. Returns the applied multiplier of
        every domain with at least one response in the (global) batch, and diagnostics."""
        pairs = list(pairs)
        domains = self._domains or tuple(sorted({d for d, _ in pairs}))
        stats = list_statistics(pairs, domains)
        applied, diagnostics = self.from_statistics(stats, domains)
        present = {d: applied[i] for i, d in enumerate(domains) if diagnostics.domains[d].responses > 0}
        return present, diagnostics

    def multipliers_batched(
        self, log_ratio: torch.Tensor, mask: torch.Tensor, domain_ids: torch.Tensor
    ) -> tuple[torch.Tensor, DNDiagnostics]:
        """Multipliers from a padded (B, T) batch: float32 (D,) on log_ratio's device, indexed by domain id.
        A domain absent from the batch gets its mode's value for a degenerate measurement."""
        if self._domains is None:
            raise ValueError("the batched API needs domains registered at construction")
        stats = batch_statistics(log_ratio, mask, domain_ids, len(self._domains))
        applied, diagnostics = self.from_statistics(stats)
        return torch.tensor(applied, dtype=torch.float32, device=log_ratio.device), diagnostics

    def from_statistics(
        self, stats: torch.Tensor, domains: Sequence[str] | None = None
    ) -> tuple[list[float], DNDiagnostics]:
        """Multipliers from local (4, D) statistics (e.g. computed by a fused kernel): reduced with `sync`,
        then finalized. Advances `step`."""
        domains = tuple(domains or self._domains or ())
        if stats.shape != (4, len(domains)):
            raise ValueError(f"statistics must have shape (4, {len(domains)}), got {tuple(stats.shape)}")
        totals = reduce_statistics(stats, self._sync).detach().to("cpu", torch.float64).tolist()
        global_std = population_std(sum(totals[TOKENS]), sum(totals[SUM]), sum(totals[SUMSQ]))
        applied, per_domain = [], {}
        for i, domain in enumerate(domains):
            std = population_std(totals[TOKENS][i], totals[SUM][i], totals[SUMSQ][i])
            measurable = std > 0 and global_std > 0
            raw = global_std / std if measurable else 1.0
            factor = min(self.upper, max(self.lower, raw))
            value = self._apply(domain, factor, measurable)
            applied.append(value)
            per_domain[domain] = DomainDiagnostics(
                responses=int(totals[RESPONSES][i]),
                tokens=int(totals[TOKENS][i]),
                std=std,
                raw_factor=raw,
                factor=factor,
                clipped=factor != raw,
                applied=value,
            )
        diagnostics = DNDiagnostics(self.mode, self.step, global_std, int(sum(totals[TOKENS])), per_domain)
        self.step += 1
        return applied, diagnostics

    def _apply(self, domain: str, factor: float, measurable: bool) -> float:
        if self.mode == "dn":
            return factor
        if self.mode == "observe":
            return 1.0
        if self.mode == "fixed":
            if domain not in self._fixed:
                raise ValueError(f"no fixed multiplier for domain {domain!r}; known: {sorted(self._fixed)}")
            return self._fixed[domain]
        if domain in self._frozen:
            return self._frozen[domain]
        if measurable:
            self._frozen[domain] = factor
            self._frozen_step[domain] = self.step
        return factor

    # ---------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict:
        return {
            "mode": self.mode,
            "step": self.step,
            "frozen": dict(self._frozen),
            "frozen_step": dict(self._frozen_step),
        }

    def load_state_dict(self, state: Mapping) -> None:
        if state.get("mode") != self.mode:
            raise ValueError(f"normalizer state was saved in mode {state.get('mode')!r}, this one is {self.mode!r}")
        self.step = int(state["step"])
        self._frozen = {str(d): float(v) for d, v in state["frozen"].items()}
        self._frozen_step = {str(d): int(v) for d, v in state["frozen_step"].items()}


def domain_multipliers(
    pairs: Iterable[tuple[str, torch.Tensor]], lower: float = DEFAULT_BOUNDS[0], upper: float = DEFAULT_BOUNDS[1]
) -> tuple[dict[str, float], DNDiagnostics]:
    """Stateless DN multipliers of one local batch of ragged responses."""
    return DomainNormalizer(mode="dn", bounds=(lower, upper)).multipliers(pairs)
