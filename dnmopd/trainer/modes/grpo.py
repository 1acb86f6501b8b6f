"""GRPO for the domain teachers: rollout -> verifier rewards -> group-normalized advantages -> clipped PPO loss.

Each prompt's n responses form a group; reward 1 for a correct verdict, 0 otherwise: a wrong answer, or no
verdict (the verifier itself failed; counted, and scored 0 as the paper did, `verifiers.on_no_verdict`).
Advantages are (r - mean) / (unbiased std + 1e-6) within the group, broadcast to every response token.
Bounded dynamic sampling keeps only groups whose rewards vary: more prompts are drawn until
`prompts_per_rollout / dp` groups are kept on this rank; once `max_generation_batches` batches were seen,
the groups of one more batch are kept as they come (a group without variance then contributes zero
advantage), so an update never loops forever.
"""

from __future__ import annotations

import torch

from dnmopd.core import DynamicSamplingFilter, grpo_advantages
from dnmopd.trainer.experience.collector import Sample, merge_phases, sample_metrics
from dnmopd.trainer.measurements.metric_table import Mean, MetricTable
from dnmopd.trainer.modes.base import Collected, Mode, StepCounts
from dnmopd.trainer.step.batch import TrainBatch
from dnmopd.trainer.step.objectives import ClippedSurrogate, ratio_reference


def reward(sample: Sample) -> float:
    return 1.0 if sample.verdict is True else 0.0


class GRPOMode(Mode):
    metrics = MetricTable(
        ("grpo/groups_seen", "sum", "Prompt groups generated for the update (dynamic sampling draws more)."),
        ("grpo/groups_kept", "sum", "Prompt groups trained on."),
        ("grpo/no_verdict", "sum", "Kept responses without a verdict (reward 0), all domains."),
        ("grpo/reward_mean", "mean", "Mean reward of the kept responses."),
    )

    verifies = True

    def __init__(self, ctx):
        super().__init__(ctx)
        if self.config.data.samples_per_prompt < 2:
            raise ValueError("GRPO needs data.samples_per_prompt >= 2 (groups to normalize over)")
        self.grpo = self.config.grpo
        groups = self.config.data.sampler.prompts_per_rollout // ctx.layout.dp_size
        self.filter = DynamicSamplingFilter(groups, self.grpo.max_generation_batches)

    def collect(self, update: int) -> Collected:
        n = self.config.data.samples_per_prompt
        kept: list[list[Sample]] = []
        seen, phases = 0, {}
        batches = self.grpo.max_generation_batches + 1 if self.grpo.dynamic_sampling else 1
        for batch_index in range(batches):  # the last batch's groups are kept unconditionally (budget spent)
            prompts = self.ctx.next_prompts()
            if self.ctx.collector is not None:
                offset = self.ctx.seed_offset(update * batches + batch_index, len(prompts))
                experience = self.ctx.collector.collect(prompts, seed_offset=offset)
                phases = merge_phases(phases, experience.phases)
                for start in range(0, len(experience.samples), n):
                    group = experience.samples[start: start + n]
                    seen += 1
                    rewards = torch.tensor([reward(s) for s in group], dtype=torch.float64)
                    if len(kept) < self.filter.target and (not self.grpo.dynamic_sampling or self.filter.keep(rewards)):
                        kept.append(group)
            if not self.ctx.any_rank(self.ctx.collector is not None and len(kept) < self.filter.target):
                break
        if self.ctx.collector is None:
            return Collected(None)
        samples = [s for group in kept for s in group]
        metrics = {**sample_metrics(samples, verified=True), "grpo/groups_seen": float(seen),
                   "grpo/groups_kept": float(len(kept)),
                   "grpo/no_verdict": float(sum(s.verdict is None for s in samples)),
                   "grpo/reward_mean": Mean(sum(reward(s) for s in samples), len(samples))}
        return Collected(self._batch(samples), metrics, phases)

    def _batch(self, samples: list[Sample]) -> TrainBatch:
        n = self.config.data.samples_per_prompt
        rewards = torch.tensor([reward(s) for s in samples], dtype=torch.float64)
        per_sample = grpo_advantages(rewards, n).float()
        advantages = [torch.full((len(s.response_ids),), float(a)) for s, a in zip(samples, per_sample, strict=True)]
        domains = self.config.data.domains
        return TrainBatch.from_rows([s.prompt.prompt_ids for s in samples], [s.response_ids for s in samples],
                                    [s.rollout_logp for s in samples], [s.rollout_logp for s in samples],
                                    [domains.index(s.domain) for s in samples], advantages=advantages)

    def prepare(self, batch: TrainBatch, update: int, staleness: int) -> dict:
        """The ratio's reference: pi_theta0 once when several steps take it on an on-policy batch, the rollout
        engine's log-probs for a batch one version old (`objectives.ratio_reference`)."""
        several = self.config.train.optimizer_steps_per_update > 1
        current = self.ctx.logp(batch) if staleness == 0 and several else None
        batch.old_logp = ratio_reference(batch, staleness, current)
        return {}

    def objective(self, counts: StepCounts):
        return ClippedSurrogate(self.ctx.head, num_responses=counts.responses, eps_low=self.grpo.eps_low,
                                eps_high=self.grpo.eps_high, dual_clip=self.grpo.dual_clip)

    def state_dict(self) -> dict:
        return {"filter": self.filter.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.filter.load_state_dict(state["filter"])
