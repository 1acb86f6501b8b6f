"""Advantages: GRPO group normalization with the bounded dynamic-sampling filter, and the annealed
teacher-trajectory injection schedule. (The OPD advantage w_d (log p_teacher - log p_student) is formed by
the trainer's OPD mode and the fused loss kernel.)

All returned advantages are detached: they are targets, never differentiated through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

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
