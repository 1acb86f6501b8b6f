"""What a run mode contributes to the shared update loop: its batch, its preparation, its loss, its metrics.

    opd   on-policy distillation: rollout, teacher scoring, DN multipliers, clipped OPD loss (or full-vocab KL)
    grpo  RL of a domain teacher: rollout, verifier rewards, group-normalized advantages, clipped PPO loss
    sft   SeqKD-SFT: teacher answers, token-mean cross-entropy

A mode sees the run only through its `ModeContext` (`dnmopd.trainer.context`). What the trainer builds for it is
declared by class attributes (`uses_rollout`, `distills`, `verifies`): the rollout engine, the method with its
teachers, the verifiers, and the experience collector over them (`ctx.collector`). Per update the loop calls

    collect(update)                  -> Collected: this rank's batch (model-parallel leaders; None elsewhere)
                                        and its unreduced metrics. May run in a background thread, overlapped
                                        with the previous update's training (train.rollout_ahead 1): it may use
                                        only the context's collection services, and the state it changes
                                        (sampler position, filters) must be its own.
    prepare(batch, update, staleness) fills what the loss needs once the batch is on every model-parallel rank
                                        (multipliers, advantages, old log-probs; collectives allowed); returns
                                        metrics. `staleness` is 0 for an on-policy batch, 1 for one collected
                                        ahead (see `objectives.ratio_reference`).
    objective(counts)                -> the per-micro-batch loss of one optimizer step (`objectives`).

Metrics are this rank's `{name: value}` dicts, reduced by name by the loop; every name a mode reports is
declared in its `metrics` table (`metric_table`). A new mode is one file: a subclass, named in `mode_class`
below.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from dnmopd.registry import LazyRegistry
from dnmopd.trainer.measurements.metric_table import MetricTable
from dnmopd.trainer.step.batch import TrainBatch


@dataclass
class Collected:
    """One update's batch as a rank collected it."""

    batch: TrainBatch | None
    """The batch on model-parallel leaders; None elsewhere."""
    metrics: dict = field(default_factory=dict)
    """This rank's metrics of the collection (not yet reduced)."""
    phases: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Wall-clock (start, end) of the collection's phases (rollout, scoring, wait), time.time() seconds."""
    policy_version: int = 0
    """Optimizer updates behind the weights that generated the batch (stamped by `RolloutAhead`)."""


@dataclass(frozen=True, slots=True)
class StepCounts:
    """Sizes of one optimizer step's slice of the batch, over all data-parallel ranks."""

    responses: int
    tokens: int
    """Loss tokens (response tokens of valid samples)."""


class Mode(ABC):
    uses_rollout: ClassVar[bool] = True
    """Whether the mode samples from the student (and so needs a rollout engine, an experience collector and
    weight syncs)."""
    distills: ClassVar[bool] = False
    """Whether the teachers score the student's responses: the trainer then builds the method (`ctx.method`:
    routing and multipliers), the teachers it routes to (with hidden states for a full-vocabulary loss) and
    their LM heads where a full-vocabulary loss or the probe needs them (`ctx.teacher_heads`)."""
    verifies: ClassVar[bool] = False
    """Whether every response needs a verdict (GRPO's rewards); other rollout modes are verified when
    rollout.verify is set."""
    metrics: ClassVar[MetricTable] = MetricTable()
    """The metrics only this mode reports (the loop's, the collector's and the objectives' are declared there)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.config = ctx.config

    @abstractmethod
    def collect(self, update: int) -> Collected:
        """This rank's batch of update `update` (every rank calls it)."""

    def prepare(self, batch: TrainBatch, update: int, staleness: int) -> dict:
        """Fill what the loss needs (every rank calls it, after the batch broadcast); returns metrics."""
        return {}

    @abstractmethod
    def objective(self, counts: StepCounts):
        """The per-micro-batch loss of one optimizer step over `counts` (global) responses and tokens."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        return None

    def close(self) -> None:
        return None


mode_class = LazyRegistry("run mode", {
    "opd": "dnmopd.trainer.modes.opd:OPDMode",
    "grpo": "dnmopd.trainer.modes.grpo:GRPOMode",
    "sft": "dnmopd.trainer.modes.sft:SFTMode",
})
"""`mode_class(run.mode)`: the Mode subclass of the run mode (its module is imported then)."""
