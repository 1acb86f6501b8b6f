"""What a run mode gets from the trainer: `ModeContext`, a narrow view of the run (never the Trainer itself).

    config, layout, run_dir, tokenizer, prompts   the run (read only) and this process's place in it
    head               the student's LM head for the objectives (vocab shard, TP group, temperature)
    method             the distillation method (routing, multipliers) of a mode that `distills`; else None
    teacher_heads      the teachers' LM-head weights, in teachers.models order, on the last pipeline stage
                       when a full-vocabulary loss needs them; else empty

    collection services (safe in the background thread of train.rollout_ahead 1):
    next_prompts()     this rank's prompts of the next rollout batch, from the run's resumable sampler
    seed_offset(d, n)  sample-seed offset of a rank's d-th rollout draw of n prompts
    collector          the ExperienceCollector over the trainer's rollout engine, the method's teachers and the
                       verifiers (model-parallel leaders of a mode that `uses_rollout`; None elsewhere)
    any_rank(flag)     whether `flag` is true on any rank (collective over a group of its own)

    main-thread services (prepare, objective, construction):
    sum_over_dp(t)     a float64 tensor summed over the data-parallel group (DN statistics)
    logp(batch)        the student's current log-probs of the batch's response tokens, on every MP rank
    run_once(fn)       fn() on global rank 0 while every rank waits (one-time preparation)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from dnmopd.trainer.experience.collector import ExperienceCollector
from dnmopd.trainer.method import Method
from dnmopd.trainer.step.objectives import LMHead


@dataclass(frozen=True, slots=True)
class Layout:
    """This process's place in the run."""

    rank: int
    """Global rank."""
    is_leader: bool
    """First rank of its model-parallel group: it collects the group's batch."""
    is_last_stage: bool
    """Last pipeline stage: it evaluates the losses."""
    dp_rank: int
    dp_size: int


@dataclass(frozen=True)
class ModeContext:
    config: object
    """The run's TrainerConfig."""
    layout: Layout
    run_dir: Path
    tokenizer: object
    """The student's PromptTokenizer."""
    prompts: object
    """The run's PromptSet."""
    head: LMHead
    method: Method | None
    teacher_heads: list[torch.Tensor]
    next_prompts: Callable[[], list]
    collector: ExperienceCollector | None
    any_rank: Callable[[bool], bool]
    sum_over_dp: Callable[[torch.Tensor], torch.Tensor]
    logp: Callable[[object], torch.Tensor]
    run_once: Callable[[Callable[[], None]], None]

    def seed_offset(self, draw: int, prompts: int) -> int:
        """Sample-seed offset of this rank's `draw`-th rollout batch of `prompts` prompts: distinct over draws
        and ranks, and the same after a resume."""
        layout = self.layout
        return (draw * layout.dp_size + layout.dp_rank) * prompts * self.config.data.samples_per_prompt
