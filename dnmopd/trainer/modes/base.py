"""What a run mode contributes to the shared update loop (`Trainer`): the batch of one update and its loss.

    opd   on-policy distillation: rollout, teacher scoring, DN multipliers, clipped OPD loss (or full-vocab KL)
    grpo  RL of a domain teacher: rollout, verifier rewards, group-normalized advantages, clipped PPO loss
    sft   SeqKD-SFT: teacher answers, token-mean cross-entropy

A mode produces the batch on each model-parallel group's leader; the trainer broadcasts it, computes the
global response count and runs the optimizer steps with the mode's objective.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from dnmopd.trainer.batch import TrainBatch
from dnmopd.trainer.collectives import all_reduce_sum


class Mode(ABC):
    uses_rollout: bool = True
    """Whether the mode samples from the student (and so needs weight sync to a rollout engine)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.config = trainer.config

    @abstractmethod
    def collect(self, update: int) -> tuple[TrainBatch | None, dict[str, float]]:
        """This rank's batch on model-parallel leaders (None elsewhere) and metrics already summed over
        data-parallel ranks. Every rank calls it (metrics reductions are collective)."""

    def prepare(self, batch: TrainBatch) -> dict[str, float]:
        """Fill what the loss needs once the batch is on every model-parallel rank (weights, advantages,
        old log-probs); returns metrics. Every rank calls it."""
        return {}

    @abstractmethod
    def objective(self, num_responses: int, num_tokens: int):
        """The per-micro-batch loss (see `objectives`) of an optimizer step over `num_responses` responses with
        `num_tokens` loss tokens, both counted over all data-parallel ranks."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        return None

    def close(self) -> None:
        return None


def counts_over(values: list[float], group) -> torch.Tensor:
    """Sum per-rank counts over a process group (float64, on the CPU)."""
    return all_reduce_sum(torch.tensor(values, dtype=torch.float64), group)
