"""A distillation method = a routing rule + a multiplier mode (+ optional injection) + the loss options.

Every method and control of the paper is a YAML preset of `MethodConfig` in configs/methods/:

    label            routing label,   multipliers observe (measured and logged, all 1: the Label baseline)
    dn_mopd          routing label,   multipliers dn
    single_*         routing single,  multipliers observe
    uniform_pool     routing pool,    multipliers observe
    dynamic_router   routing dynamic, multipliers observe
    fixed_*, frozen_update0           multipliers fixed constants
    annealed_injection                label + injected teacher trajectories with advantage c(t)
    token_share      routing label,   multipliers token_share (the rival rule, Open-MOPD's M1)

`Method` holds the runtime pieces (router, normalizer) and turns a scored batch into the per-response
targets and multipliers the update needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dnmopd.config import FieldValueError
from dnmopd.core import DEFAULT_BOUNDS, MULTIPLIER_MODES, DomainNormalizer, Router, RoutingConfig
from dnmopd.core.clipping import validate_clip
from dnmopd.core.normalizer import TARGET_SHARES, validate_bounds

LOSS_KINDS = ("sampled_token", "full_vocab_reverse_kl", "topk_reverse_kl")


@dataclass(kw_only=True, slots=True)
class NormalizerConfig:
    multipliers: str = "observe"
    """dn (DN-MOPD), observe (measure and log, apply 1), fixed (constants), frozen (first measurable batch) or
    token_share (the rival rule, Open-MOPD's M1: clip(target share / observed token share), docs/methods.md)."""
    bounds: tuple[float, ...] = DEFAULT_BOUNDS
    """Clip bounds (lower, upper) of sigma_all / sigma_d (and of token_share's ratio)."""
    fixed: dict[str, float] | None = None
    """Per-domain constants for multipliers fixed, e.g. {math: 2.0, code: 1.0, ifeval: 0.25}."""
    target_share: str = "responses"
    """token_share's target share of a domain: responses (its share of the batch's responses, i.e. of the
    prompts) or uniform (1 / the domains in the batch). The observed share is its share of the response tokens."""

    def __post_init__(self):
        if self.multipliers not in MULTIPLIER_MODES:
            raise ValueError(f"normalizer.multipliers must be one of {MULTIPLIER_MODES}, got {self.multipliers!r}")
        try:
            validate_bounds(self.bounds)
        except ValueError as error:
            raise FieldValueError("bounds", str(error)) from None
        if self.target_share not in TARGET_SHARES:
            raise ValueError(f"normalizer.target_share must be one of {TARGET_SHARES}, got {self.target_share!r}")

    def build(self, domains: Sequence[str]) -> DomainNormalizer:
        return DomainNormalizer(domains, multipliers=self.multipliers, bounds=self.bounds, fixed=self.fixed,
                                target_share=self.target_share)


@dataclass(kw_only=True, slots=True)
class InjectionConfig:
    bank: Path
    """Injection bank built by `launch/build_injection_bank.py` (teacher trajectories per prompt)."""
    initial: float = 1.0
    """c0: the constant advantage of injected trajectories at update 0, in (0, 2]."""
    anneal_updates: int = 40
    """A: c(t) = c0 * max(0, 1 - t / A) reaches 0 after A updates."""

    def __post_init__(self):
        if not 0 < self.initial <= 2:
            raise ValueError(f"injection.initial must lie in (0, 2], got {self.initial}")
        if self.anneal_updates < 1:
            raise ValueError(f"injection.anneal_updates must be >= 1, got {self.anneal_updates}")


@dataclass(kw_only=True, slots=True)
class LossConfig:
    kind: str = "sampled_token"
    """sampled_token: the clipped surrogate on A_t = w_d (log p_T(y_t) - log p_S(y_t)) (the paper);
    full_vocab_reverse_kl: w_d * KL(student || teacher) over the whole vocabulary at every response position
    (in-process teachers only, through the fused kernel); topk_reverse_kl: w_d * KL(student || teacher) over
    the teacher's top-k tokens at every response position plus one tail bucket holding the rest of the
    vocabulary on both sides (in-process and SGLang teachers; docs/methods.md)."""
    topk: int = 64
    """k of topk_reverse_kl: the teacher's most likely tokens kept at each response position."""
    eps_low: float = 0.2
    """PPO clip: ratio >= 1 - eps_low for negative advantages."""
    eps_high: float = 0.2
    """PPO clip: ratio <= 1 + eps_high for positive advantages."""
    dual_clip: float | None = None
    """Dual-clip constant c > 1 capping the loss of negative advantages at -c A (None: off)."""

    @property
    def full_vocab(self) -> bool:
        """Whether the loss needs each target teacher's whole distribution (its final hidden states)."""
        return self.kind == "full_vocab_reverse_kl"

    @property
    def teacher_topk(self) -> int:
        """Top-k log-probs each teacher must return per response position (0: none)."""
        return self.topk if self.kind == "topk_reverse_kl" else 0

    def __post_init__(self):
        if self.kind not in LOSS_KINDS:
            raise ValueError(f"loss.kind must be one of {LOSS_KINDS}, got {self.kind!r}")
        if self.topk < 1:
            raise ValueError(f"loss.topk must be >= 1, got {self.topk}")
        validate_clip(self.eps_low, self.eps_high, self.dual_clip)


@dataclass(kw_only=True, slots=True)
class MethodConfig:
    name: str = "dn_mopd"
    """Method name (for logs and the model card)."""
    routing: RoutingConfig = field(default_factory=lambda: RoutingConfig(
        rule="label", teachers=["code_teacher", "ifeval_teacher", "math_teacher"],
        label_map={"default": "code_teacher", "math": "math_teacher", "code": "code_teacher",
                   "ifeval": "ifeval_teacher"}))
    """Which teacher's log-probs are each response's target."""
    normalizer: NormalizerConfig = field(default_factory=lambda: NormalizerConfig(multipliers="dn"))
    """Per-domain advantage multipliers."""
    injection: InjectionConfig | None = None
    """Annealed teacher-trajectory injection (label routing only; exclusive with dn/fixed multipliers)."""
    loss: LossConfig = field(default_factory=LossConfig)
    """The loss of the student update."""

    def __post_init__(self):
        if self.injection is not None:
            if self.routing.rule != "label":
                raise ValueError("injection works with label routing only")
            if self.normalizer.multipliers != "observe":
                raise ValueError("injection is exclusive with applied multipliers: use normalizer.multipliers observe")
            if self.loss.kind != "sampled_token":
                raise ValueError(f"injection gives injected trajectories a constant advantage, which the "
                                 f"{self.loss.kind} loss does not take (use loss.kind sampled_token)")


class Method:
    """Runtime of a method: routing of targets and the per-domain multipliers of every batch."""

    def __init__(self, config: MethodConfig, domains: Sequence[str]):
        self.config = config
        self.domains = tuple(domains)
        self.router = Router(config.routing)
        self.normalizer = config.normalizer.build(self.domains)

    def teachers_needed(self, domain: str) -> tuple[str, ...]:
        return self.router.teachers_needed(domain)

    def targets(
        self, domains: Sequence[str], scores: Sequence[Mapping[str, torch.Tensor | None]], lengths: Sequence[int]
    ) -> tuple[list[torch.Tensor | None], list[str | None]]:
        """Per response: the target log-probs (None when a needed teacher failed and the sample is masked)
        and the applied teacher's name."""
        targets, applied = [], []
        for domain, per_teacher, length in zip(domains, scores, lengths, strict=True):
            needed = self.teachers_needed(domain)
            if any(per_teacher.get(name) is None for name in needed):
                targets.append(None)
                applied.append(None)
                continue
            target, name = self.router.target(domain, per_teacher, length)
            targets.append(target)
            applied.append(name)
        return targets, applied

    def domain_index(self, domain: str) -> int:
        if domain not in self.domains:
            raise ValueError(f"domain {domain!r} is not one of the run's domains {list(self.domains)}")
        return self.domains.index(domain)

    def state_dict(self) -> dict:
        return {"normalizer": self.normalizer.state_dict()}

    def load_state_dict(self, state: Mapping) -> None:
        self.normalizer.load_state_dict(state["normalizer"])
