"""What a run mode gets from the trainer: `ModeContext`, a narrow view of the run (never the Trainer itself).

    config, layout, run_dir, tokenizer, prompts   the run (read only) and this process's place in it
    head               the student's LM head for the objectives (vocab shard, TP group, temperature)

    collection services (safe in the background thread of train.rollout_ahead 1):
    next_prompts()     this rank's prompts of the next rollout batch, from the run's resumable sampler
    seed_offset(d, n)  sample-seed offset of a rank's d-th rollout draw of n prompts
    experience(...)    an ExperienceCollector over the trainer's rollout engine, teachers and verifiers
                       (model-parallel leaders; None elsewhere)
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

from dnmopd.trainer.objectives import LMHead


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
    next_prompts: Callable[[], list]
    experience: Callable[..., object]
    """experience(*, teachers_for=None, hidden_states=False, verify=False) -> ExperienceCollector | None."""
    any_rank: Callable[[bool], bool]
    sum_over_dp: Callable[[torch.Tensor], torch.Tensor]
    logp: Callable[[object], torch.Tensor]
    run_once: Callable[[Callable[[], None]], None]

    def seed_offset(self, draw: int, prompts: int) -> int:
        """Sample-seed offset of this rank's `draw`-th rollout batch of `prompts` prompts: distinct over draws
        and ranks, and the same after a resume."""
        layout = self.layout
        return (draw * layout.dp_size + layout.dp_rank) * prompts * self.config.data.samples_per_prompt
