"""Advantages: the reverse-KL OPD advantage and its per-domain scaling, GRPO group normalization with the
bounded dynamic-sampling filter, and the annealed teacher-trajectory injection schedule.

All returned advantages are detached: they are targets, never differentiated through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch


def reverse_kl_advantages(
    teacher_logp: torch.Tensor, student_logp: torch.Tensor, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """A_t = log p_teacher(y_t) - log p_student(y_t), exactly 0 where `valid` is false (even over NaN)."""
    if teacher_logp.shape != student_logp.shape:
        raise ValueError(f"teacher shape {tuple(teacher_logp.shape)} != student shape {tuple(student_logp.shape)}")
    advantages = (teacher_logp - student_logp).detach()
    if valid is None:
        return advantages
    if valid.shape != advantages.shape:
        raise ValueError(f"valid shape {tuple(valid.shape)} != advantage shape {tuple(advantages.shape)}")
    return torch.where(valid.bool(), advantages, torch.zeros_like(advantages))


def scale_advantages(
    advantages: Sequence[torch.Tensor], domains: Sequence[str], weights: Mapping[str, float]
) -> list[torch.Tensor]:
    """Multiply each response's advantages by its domain's multiplier (ragged form)."""
    if len(advantages) != len(domains):
        raise ValueError(f"{len(advantages)} advantage rows but {len(domains)} domain labels")
    missing = sorted({d for d in domains if d not in weights})
    if missing:
        raise ValueError(f"no multiplier for domains {missing}")
    return [(adv * float(weights[d])).detach() for adv, d in zip(advantages, domains, strict=True)]


def scale_advantages_batched(
    advantages: torch.Tensor, domain_ids: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """Multiply advantages (B, ...) by weights[domain_ids] (weights: 1-D, one per domain)."""
    if weights.dim() != 1:
        raise ValueError(f"weights must be 1-D (one per domain), got shape {tuple(weights.shape)}")
    if domain_ids.shape != advantages.shape[:1]:
        raise ValueError(f"domain_ids shape {tuple(domain_ids.shape)} != ({advantages.shape[0]},)")
    per_response = weights.to(dtype=advantages.dtype, device=advantages.device)[domain_ids.long()]
    per_response = per_response.reshape(-1, *([1] * (advantages.dim() - 1)))
    return (advantages * per_response).detach()


# --------------------------------------------------------------------------------------------- GRPO
GRPO_STD_EPS = 1e-6


def grpo_advantages(rewards: torch.Tensor, group_size: int, eps: float = GRPO_STD_EPS) -> torch.Tensor:
    """(r - mean_group) / (std_group + eps), with the unbiased (n - 1) group std, for rewards laid out as
    consecutive groups of `group_size` responses of one prompt."""
    if group_size < 2:
        raise ValueError(f"GRPO needs groups of at least 2 responses, got group_size={group_size}")
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards must be 1-D with a multiple of {group_size} entries, got {tuple(rewards.shape)}")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards must be finite")
    groups = rewards.detach().reshape(-1, group_size)
    normalized = (groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + eps)
    return normalized.reshape(-1)


@dataclass
class DynamicSamplingFilter:
    """Bounded dynamic sampling: keep prompt groups whose rewards vary, until `target` groups are kept for the
    rollout; after `target * max_generation_batches` groups were seen, keep every group (a zero-variance group
    then contributes zero advantage), so a rollout never loops forever on easy or impossible prompts."""

    target: int
    max_generation_batches: int = 8
    seen: int = 0
    kept: int = 0
    dropped: int = 0
    released: int = 0

    def __post_init__(self):
        if self.target < 1 or self.max_generation_batches < 1:
            raise ValueError(f"target ({self.target}) and max_generation_batches "
                             f"({self.max_generation_batches}) must be >= 1")

    @property
    def budget(self) -> int:
        return self.target * self.max_generation_batches

    def keep(self, group_rewards: torch.Tensor) -> bool:
        if self.kept >= self.target:  # the previous rollout is complete: start a new one
            self.seen = self.kept = self.dropped = self.released = 0
        self.seen += 1
        if self.seen > self.budget:
            self.released += 1
            self.kept += 1
            return True
        rewards = group_rewards.detach().to(torch.float64).reshape(-1)
        varies = rewards.numel() > 1 and float(rewards.std()) > 1e-8
        if varies:
            self.kept += 1
        else:
            self.dropped += 1
        return varies

    def state_dict(self) -> dict:
        return {"seen": self.seen, "kept": self.kept, "dropped": self.dropped, "released": self.released}

    def load_state_dict(self, state: Mapping) -> None:
        for key in ("seen", "kept", "dropped", "released"):
            setattr(self, key, int(state[key]))


# ------------------------------------------------------------------------------ annealed injection
def injection_constant(update: int, initial: float, anneal_updates: int) -> float:
    """c(t) = c0 * max(0, 1 - t / A): the constant advantage of an injected teacher trajectory at update t."""
    if not 0 < initial <= 2:
        raise ValueError(f"injection constant c0 must lie in (0, 2], got {initial}")
    if anneal_updates < 1:
        raise ValueError(f"anneal_updates must be >= 1, got {anneal_updates}")
    if update < 0:
        raise ValueError(f"update index must be >= 0, got {update}")
    return initial * max(0.0, 1.0 - update / anneal_updates)


def select_injection(verdicts: Sequence[bool | None]) -> int:
    """Which response of a prompt group (in index order) is replaced by the teacher trajectory: the first
    response the verifier judged wrong, else the first response. Every verdict must exist: a missing verdict
    (verifier failure) stops the batch rather than biasing the choice."""
    if not verdicts:
        raise ValueError("cannot select an injection target in an empty group")
    missing = [i for i, v in enumerate(verdicts) if v is None]
    if missing:
        raise RuntimeError(f"missing correctness verdict for responses {missing} of the group")
    return next((i for i, correct in enumerate(verdicts) if not correct), 0)


def inject_constant_advantages(advantages: torch.Tensor, constant: float) -> torch.Tensor:
    """An injected response's advantages: the constant on every token when it is positive, else unchanged."""
    return torch.full_like(advantages, constant) if constant > 0 else advantages
