"""Teacher routing: which teacher's sampled-token log-probs become a response's target.

    label    the teacher named for the response's domain (a domain -> teacher map with a "default" entry)
    single   one teacher for every response
    pool     log((1/K) * sum_k p_k(y_t)) per token: the uniform mixture of the K teachers' probabilities of
             the sampled token
    dynamic  the teacher with the lowest mean sampled-token log-prob over the response (the least likely
             teacher); exact ties go to the alphabetically first name

Teacher scores are validated before use: a missing, extra, mis-shaped or non-finite row, or one holding the
failure sentinel, raises ScoreError. There is no silent fallback to another teacher.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

ROUTING_RULES = ("label", "single", "pool", "dynamic")
POOL = "pool"
"""The target pool routing applies to every response: the uniform mixture of all teachers (in place of a name)."""
POOL_INDEX = -1
"""`TrainBatch.teacher_index` of a response whose full-vocabulary target is the pool mixture (teachers are >= 0)."""
SENTINEL = -100.0
"""Marks a failed teacher score in a log-prob row (a value no real log-prob row should hold exactly)."""


class ScoreError(RuntimeError):
    """A teacher score is unusable; the batch must not train on it."""


def validated_rows(
    per_teacher: Mapping[str, object], teachers: Sequence[str], length: int
) -> dict[str, torch.Tensor]:
    """Every registered teacher's row as float32 of shape (length,), or ScoreError."""
    if not isinstance(per_teacher, Mapping):
        raise ScoreError(f"teacher scores must be a mapping of teacher -> row, got {type(per_teacher).__name__}")
    if set(per_teacher) != set(teachers):
        missing, extra = sorted(set(teachers) - set(per_teacher)), sorted(set(per_teacher) - set(teachers))
        raise ScoreError(f"teacher scores do not match the registered teachers: missing {missing}, extra {extra}")
    if length <= 0:
        raise ScoreError(f"response length must be positive, got {length}")
    rows = {}
    for name in teachers:
        row = per_teacher[name]
        if row is None:
            raise ScoreError(f"teacher {name!r}: no scores (failed request)")
        row = torch.as_tensor(row, dtype=torch.float32)
        if row.shape != (length,):
            raise ScoreError(f"teacher {name!r}: row shape {tuple(row.shape)}, expected ({length},)")
        if not torch.isfinite(row).all():
            raise ScoreError(f"teacher {name!r}: non-finite log-prob at {_first(~torch.isfinite(row))}")
        if (row == SENTINEL).any():
            raise ScoreError(f"teacher {name!r}: failure sentinel at {_first(row == SENTINEL)}")
        rows[name] = row
    return rows


def _first(flags: torch.Tensor) -> int:
    return int(flags.nonzero()[0, 0])


def response_mask(loss_mask: torch.Tensor | None, length: int) -> torch.Tensor:
    """The response's valid-token mask as bool (length,); None means every token is valid."""
    if loss_mask is None:
        return torch.ones(length, dtype=torch.bool)
    mask = torch.as_tensor(loss_mask).bool()
    if mask.shape != (length,):
        raise ScoreError(f"loss mask shape {tuple(mask.shape)}, expected ({length},)")
    if not mask.any():
        raise ScoreError("empty response mask: no valid token to route on")
    return mask


def mean_scores(rows: Mapping[str, torch.Tensor], mask: torch.Tensor) -> dict[str, float]:
    """Each teacher's mean sampled-token log-prob over the valid tokens."""
    return {name: float(row[mask].mean()) for name, row in rows.items()}


def argmin_name(scores: Mapping[str, float]) -> str:
    """The teacher with the lowest score; exact ties go to the alphabetically first name."""
    if not scores:
        raise ScoreError("no teacher scores to choose from")
    bad = [name for name, value in scores.items() if not math.isfinite(value)]
    if bad:
        raise ScoreError(f"non-finite mean score for teachers {sorted(bad)}")
    return min(sorted(scores), key=lambda name: scores[name])


def mixture_logp(rows: Mapping[str, torch.Tensor], weights: Mapping[str, float]) -> torch.Tensor:
    """log(sum_k w_k p_k(y_t)) per token for a fixed mixture (weights >= 0, summing to 1)."""
    if set(weights) != set(rows):
        raise ValueError(f"mixture weights {sorted(weights)} do not match teachers {sorted(rows)}")
    values = [float(weights[n]) for n in sorted(rows)]
    if any(w < 0 for w in values) or abs(sum(values) - 1.0) > 1e-6:
        raise ValueError(f"mixture weights must be >= 0 and sum to 1, got {dict(weights)}")
    log_weights = torch.tensor([math.log(w) if w > 0 else -math.inf for w in values])
    stacked = torch.stack([rows[n] for n in sorted(rows)]).to(torch.float32)
    return torch.logsumexp(stacked + log_weights[:, None], dim=0)


def pool_logp(rows: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """log of the uniform 1/K mixture of the teachers' sampled-token probabilities."""
    stacked = torch.stack([rows[n] for n in sorted(rows)]).to(torch.float32)
    return torch.logsumexp(stacked, dim=0) - math.log(len(rows))


@dataclass(kw_only=True, slots=True)
class RoutingConfig:
    rule: str = "label"
    """One of label, single, pool, dynamic."""
    teachers: list[str] = field(default_factory=list)
    """Registered teacher names (the keys of every score mapping)."""
    label_map: dict[str, str] = field(default_factory=dict)
    """Rule label: domain -> teacher, with a "default" entry for unlisted domains."""
    teacher: str | None = None
    """Rule single: the one teacher every response is distilled from."""

    def __post_init__(self):
        if self.rule not in ROUTING_RULES:
            raise ValueError(f"routing.rule must be one of {ROUTING_RULES}, got {self.rule!r}")
        if not self.teachers or len(set(self.teachers)) != len(self.teachers):
            raise ValueError(f"routing.teachers must be a non-empty list of distinct names, got {self.teachers}")
        if self.rule == "label":
            if "default" not in self.label_map:
                raise ValueError("routing.label_map needs a 'default' entry for domains it does not list")
            unknown = sorted({t for t in self.label_map.values() if t not in self.teachers})
            if unknown:
                raise ValueError(f"routing.label_map names unregistered teachers {unknown}; known {self.teachers}")
        elif self.label_map:
            raise ValueError(f"routing.label_map is only used by rule label, not {self.rule!r}")
        if self.rule == "single":
            if self.teacher not in self.teachers:
                raise ValueError(f"routing.teacher must be one of {self.teachers}, got {self.teacher!r}")
        elif self.teacher is not None:
            raise ValueError(f"routing.teacher is only used by rule single, not {self.rule!r}")
        if self.rule in ("pool", "dynamic") and len(self.teachers) < 2:
            raise ValueError(f"routing rule {self.rule!r} needs at least two teachers")


class Router:
    """Chooses each response's target log-probs from its teachers' scores."""

    Config = RoutingConfig

    def __init__(self, config: RoutingConfig):
        self.config = config
        self.teachers = tuple(sorted(config.teachers))

    def label_teacher(self, domain: str | None) -> str:
        """The teacher label routing assigns to a domain (the default for an unlisted or empty domain)."""
        label_map = self.config.label_map
        return label_map.get(domain or "default", label_map["default"])

    def teachers_needed(self, domain: str | None) -> tuple[str, ...]:
        """The teachers that must score a response of this domain under this routing rule."""
        if self.config.rule == "label":
            return (self.label_teacher(domain),)
        if self.config.rule == "single":
            return (self.config.teacher,)
        return self.teachers

    def target(
        self, domain: str | None, per_teacher: Mapping[str, object], length: int,
        loss_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, str]:
        """(target log-probs float32 (length,), name of the applied teacher or POOL)."""
        needed = self.teachers_needed(domain)
        rows = validated_rows({n: per_teacher.get(n) for n in needed}, needed, length)
        rule = self.config.rule
        if rule == POOL:
            return pool_logp(rows), POOL
        if rule == "dynamic":
            name = argmin_name(mean_scores(rows, response_mask(loss_mask, length)))
            return rows[name].clone(), name
        (name,) = needed
        return rows[name], name
