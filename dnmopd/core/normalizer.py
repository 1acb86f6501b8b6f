"""Domain normalization: w_d = clip(sigma_all / sigma_d, lower, upper).

sigma_d is the population std of r = log p_teacher - log p_rollout over every valid token of domain d in
the (global) rollout batch; sigma_all the population std over all valid tokens of the batch pooled across
domains. A factor is degenerate (raw factor 1) when either std is 0, which includes resting on fewer than
two tokens. The multiplier mode decides what is applied; the statistic is measured and reported in every
mode:

    dn           the measured clip(sigma_all / sigma_d), re-measured every batch (DN-MOPD)
    observe      1.0 (Label routing, multipliers recorded only)
    fixed        a constant per domain (fixed-weight controls)
    frozen       per domain, the factor of the first batch in which that domain was measurable
    token_share  the rival rule (Open-MOPD's M1): clip(target share / observed token share, lower, upper),
                 re-measured every batch

token_share's observed share of domain d is tokens_d / tokens (the batch's valid response tokens, the same
count sigma_d rests on); its target share is the domain's share of the batch's responses (`target_share`
"responses": the prompt share, since every prompt has the same number of samples) or 1 / (domains present)
("uniform"). A domain without tokens gets the degenerate raw value 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import torch

from dnmopd.core.statistics import RESPONSES, SUM, SUMSQ, TOKENS, population_std

DEFAULT_BOUNDS = (0.25, 4.0)
MULTIPLIER_MODES = ("dn", "observe", "fixed", "frozen", "token_share")
TARGET_SHARES = ("responses", "uniform")


@dataclass(frozen=True)
class DomainDiagnostics:
    responses: int
    tokens: int
    std: float
    raw_factor: float
    factor: float
    clipped: bool
    applied: float
    share_factor: float = 1.0
    """clip(target share / observed token share): the token_share rule's value (measured in every mode)."""


@dataclass(frozen=True)
class DNDiagnostics:
    multipliers: str
    step: int
    global_std: float
    global_tokens: int
    domains: dict[str, DomainDiagnostics]

    def to_dict(self) -> dict:
        return {
            "multipliers": self.multipliers,
            "step": self.step,
            "global_std": self.global_std,
            "global_tokens": self.global_tokens,
            "domains": {d: asdict(diag) for d, diag in self.domains.items()},
        }

    def to_metrics(self, prefix: str = "dn") -> dict[str, float]:
        metrics = {f"{prefix}/global_std": self.global_std, f"{prefix}/global_tokens": float(self.global_tokens)}
        for domain, diag in self.domains.items():
            for key in ("tokens", "std", "raw_factor", "factor", "applied", "clipped", "share_factor"):
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
    """Per-domain advantage multipliers from the global batch's (4, D) log-ratio statistics.

    domains: the run's domain names, in the order of the statistics' columns.
    multipliers: one of MULTIPLIER_MODES.
    bounds: (lower, upper) clip bounds; (0, inf) disables clipping, (1, 1) forces 1.
    fixed: constant per domain, required for and only allowed with multipliers "fixed".
    target_share: token_share's target share of each domain, "responses" or "uniform" (module docstring).
    """

    def __init__(
        self,
        domains: Sequence[str],
        *,
        multipliers: str = "dn",
        bounds: Sequence[float] = DEFAULT_BOUNDS,
        fixed: Mapping[str, float] | None = None,
        target_share: str = "responses",
    ):
        if multipliers not in MULTIPLIER_MODES:
            raise ValueError(f"multipliers must be one of {MULTIPLIER_MODES}, got {multipliers!r}")
        if target_share not in TARGET_SHARES:
            raise ValueError(f"target_share must be one of {TARGET_SHARES}, got {target_share!r}")
        self.lower, self.upper = validate_bounds(bounds)
        domains = tuple(domains)
        if not domains:
            raise ValueError("domains must not be empty")
        if len(set(domains)) != len(domains):
            raise ValueError(f"domains must be unique, got {list(domains)}")
        if not all(isinstance(d, str) and d for d in domains):
            raise ValueError(f"domains must be non-empty strings, got {list(domains)}")
        if multipliers == "fixed":
            if not fixed:
                raise ValueError("multipliers 'fixed' needs a non-empty `fixed` mapping of domain -> multiplier")
            for domain, value in fixed.items():
                if not self.lower <= float(value) <= self.upper:
                    raise ValueError(
                        f"fixed multiplier {domain}={value} lies outside bounds [{self.lower}, {self.upper}]"
                    )
            missing = [d for d in domains if d not in fixed]
            if missing:
                raise ValueError(f"fixed multipliers missing for registered domains {missing}")
            fixed = {d: float(v) for d, v in fixed.items()}
        elif fixed is not None:
            raise ValueError(f"`fixed` multipliers are only allowed with multipliers 'fixed', not {multipliers!r}")
        self.multipliers = multipliers
        self.target_share = target_share
        self.domains = domains
        self._fixed = fixed
        self.step = 0
        self._frozen: dict[str, float] = {}
        self._frozen_step: dict[str, int] = {}

    @property
    def frozen(self) -> dict[str, float]:
        return dict(self._frozen)

    def from_statistics(self, stats: torch.Tensor) -> tuple[list[float], DNDiagnostics]:
        """The applied multiplier of every domain (in `domains` order) and diagnostics, from the global batch's
        (4, D) statistics (``dnmopd.core.statistics``). A domain absent from the batch gets its mode's value
        for a degenerate measurement. Advances `step`."""
        if stats.shape != (4, len(self.domains)):
            raise ValueError(f"statistics must have shape (4, {len(self.domains)}), got {tuple(stats.shape)}")
        totals = stats.detach().to("cpu", torch.float64).tolist()
        global_std = population_std(sum(totals[TOKENS]), sum(totals[SUM]), sum(totals[SUMSQ]))
        share_factors = self._share_factors(totals[RESPONSES], totals[TOKENS])
        applied, per_domain = [], {}
        for i, domain in enumerate(self.domains):
            std = population_std(totals[TOKENS][i], totals[SUM][i], totals[SUMSQ][i])
            measurable = std > 0 and global_std > 0
            raw = global_std / std if measurable else 1.0
            factor = self._clip(raw)
            value = share_factors[i] if self.multipliers == "token_share" else self._apply(domain, factor, measurable)
            applied.append(value)
            per_domain[domain] = DomainDiagnostics(
                responses=int(totals[RESPONSES][i]),
                tokens=int(totals[TOKENS][i]),
                std=std,
                raw_factor=raw,
                factor=factor,
                clipped=factor != raw,
                applied=value,
                share_factor=share_factors[i],
            )
        diagnostics = DNDiagnostics(self.multipliers, self.step, global_std, int(sum(totals[TOKENS])), per_domain)
        self.step += 1
        return applied, diagnostics

    def _clip(self, raw: float) -> float:
        return min(self.upper, max(self.lower, raw))

    def _share_factors(self, responses: list[float], tokens: list[float]) -> list[float]:
        """token_share's clip(target share / observed token share) per domain (1 for a domain without tokens)."""
        all_tokens, all_responses = sum(tokens), sum(responses)
        present = sum(1 for n in tokens if n > 0)
        factors = []
        for n_responses, n_tokens in zip(responses, tokens, strict=True):
            if n_tokens <= 0:
                factors.append(self._clip(1.0))
                continue
            target = n_responses / all_responses if self.target_share == "responses" else 1.0 / present
            factors.append(self._clip(target / (n_tokens / all_tokens)))
        return factors

    def _apply(self, domain: str, factor: float, measurable: bool) -> float:
        if self.multipliers == "dn":
            return factor
        if self.multipliers == "observe":
            return 1.0
        if self.multipliers == "fixed":
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
            "multipliers": self.multipliers,
            "step": self.step,
            "frozen": dict(self._frozen),
            "frozen_step": dict(self._frozen_step),
        }

    def load_state_dict(self, state: Mapping) -> None:
        saved = state.get("multipliers", state.get("mode"))  # checkpoints before the rename say "mode"
        if saved != self.multipliers:
            raise ValueError(f"normalizer state was saved with multipliers {saved!r}, this one uses "
                             f"{self.multipliers!r}")
        self.step = int(state["step"])
        self._frozen = {str(d): float(v) for d, v in state["frozen"].items()}
        self._frozen_step = {str(d): int(v) for d, v in state["frozen_step"].items()}
