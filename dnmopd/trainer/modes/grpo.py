"""GRPO for the domain teachers: rollout -> verifier rewards -> group-normalized advantages -> clipped PPO loss.

Each prompt's n responses form a group; reward 1 for a correct verdict, 0 for a wrong one. A verdict of
None (the verifier itself failed) follows `grpo.on_no_verdict`: `zero` scores it 0 as the paper did (and
counts it), `stop` fails the update. Advantages are (r - mean) / (unbiased std + 1e-6) within the group,
broadcast to every response token. Bounded dynamic sampling keeps only groups whose rewards vary: more
prompts are drawn until `prompts_per_rollout / dp` groups are kept on this rank; once
`max_generation_batches` batches were seen, the groups of one more batch are kept as they come (a group
without variance then contributes zero advantage), so an update never loops forever.
"""

from __future__ import annotations

import torch

from dnmopd.core import DynamicSamplingFilter, grpo_advantages
from dnmopd.trainer.batch import TrainBatch
from dnmopd.trainer.experience import ExperienceCollector, Sample, rollout_counts
from dnmopd.trainer.modes.base import Mode, counts_over
from dnmopd.trainer.objectives import ClippedSurrogate


class GRPOMode(Mode):
    def __init__(self, trainer):
        super().__init__(trainer)
        if self.config.data.samples_per_prompt < 2:
            raise ValueError("GRPO needs data.samples_per_prompt >= 2 (groups to normalize over)")
        self.grpo = self.config.grpo
        self.collector = None
        if trainer.is_leader:
            self.collector = ExperienceCollector(trainer.rollout_engine, None, sampling=self.config.rollout.sampling,
                                                 samples_per_prompt=self.config.data.samples_per_prompt,
                                                 **trainer.verification(required=True))
        groups = self.config.data.sampler.prompts_per_rollout // trainer.dp_size
        self.filter = DynamicSamplingFilter(groups, self.grpo.max_generation_batches)

    def _reward(self, sample: Sample) -> float:
        if sample.verdict is None and self.grpo.on_no_verdict == "stop":
            raise RuntimeError(f"the {sample.domain} verifier gave no verdict for a response to prompt "
                               f"{sample.prompt.index} (grpo.on_no_verdict=stop)")
        return 1.0 if sample.verdict is True else 0.0

    def collect(self, update: int) -> tuple[TrainBatch | None, dict[str, float]]:
        trainer, n = self.trainer, self.config.data.samples_per_prompt
        kept: list[list[Sample]] = []
        seen = no_verdict = 0
        rollout_seconds = 0.0
        batches = self.grpo.max_generation_batches + 1 if self.grpo.dynamic_sampling else 1
        for batch_index in range(batches):  # the last batch's groups are kept unconditionally (budget spent)
            prompts = trainer.next_prompts()
            if trainer.is_leader:
                offset = trainer.seed_offset(update * batches + batch_index, len(prompts))
                experience = self.collector.collect(prompts, seed_offset=offset)
                rollout_seconds += experience.rollout_seconds
                for start in range(0, len(experience.samples), n):
                    group = experience.samples[start: start + n]
                    seen += 1
                    no_verdict += sum(s.verdict is None for s in group)
                    rewards = torch.tensor([self._reward(s) for s in group], dtype=torch.float64)
                    if len(kept) < self.filter.target and (not self.grpo.dynamic_sampling or self.filter.keep(rewards)):
                        kept.append(group)
            pending = counts_over([float(trainer.is_leader and len(kept) < self.filter.target)], trainer.world)
            if pending.item() == 0:
                break
        samples = [s for group in kept for s in group]
        batch = self._batch(samples) if trainer.is_leader else None
        counts = [*rollout_counts(samples, rollout_seconds), seen, len(kept), no_verdict,
                  sum(self._reward(s) for s in samples)] if trainer.is_leader else [0.0] * 8
        totals = counts_over(counts, trainer.dims.dp_group)
        metrics = trainer.rollout_metrics(totals[:4])
        metrics.update({"grpo/groups_seen": totals[4].item(), "grpo/groups_kept": totals[5].item(),
                        "grpo/no_verdict": totals[6].item(), "grpo/reward_mean": (totals[7] / totals[0]).item()})
        metrics.update(trainer.accuracy_metrics(samples if trainer.is_leader else None))
        return batch, metrics

    def _batch(self, samples: list[Sample]) -> TrainBatch:
        n = self.config.data.samples_per_prompt
        rewards = torch.tensor([self._reward(s) for s in samples], dtype=torch.float64)
        per_sample = grpo_advantages(rewards, n).float()
        advantages = [torch.full((len(s.response_ids),), float(a)) for s, a in zip(samples, per_sample, strict=True)]
        domains = self.config.data.domains
        return TrainBatch.from_rows([s.prompt.prompt_ids for s in samples], [s.response_ids for s in samples],
                                    [s.rollout_logp for s in samples], [s.rollout_logp for s in samples],
                                    [domains.index(s.domain) for s in samples], advantages=advantages)

    def prepare(self, batch: TrainBatch) -> dict[str, float]:
        if self.config.train.optimizer_steps_per_update > 1:
            batch.old_logp = self.trainer.logp(batch)
        return {}

    def objective(self, num_responses: int, num_tokens: int):
        return ClippedSurrogate(self.trainer.output_chunk, self.trainer.dims.pg.tp, num_responses=num_responses,
                                eps_low=self.grpo.eps_low, eps_high=self.grpo.eps_high, dual_clip=self.grpo.dual_clip,
                                chunk_size=self.config.train.logit_chunk_tokens)

    def state_dict(self) -> dict:
        return {"filter": self.filter.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.filter.load_state_dict(state["filter"])
