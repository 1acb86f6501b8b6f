"""On-policy distillation: rollout -> teacher scoring -> targets (routing) -> DN multipliers -> OPD loss.

With annealed injection, one response of each prompt group found in the injection bank (the first one the
verifier judged wrong or could not judge, else the first) is replaced by the teacher's trajectory, whose
every token then takes the constant advantage c(t) = c0 * max(0, 1 - t / A) through the same clipped loss.

With `method.loss.kind: full_vocab_reverse_kl` each response distills from its routed teacher's whole
distribution (label, single, and dynamic routing's per-response teacher) or, for pool routing, from the
uniform mixture of all teachers' distributions; in-process teachers return the hidden states it needs.
"""

from __future__ import annotations

import dataclasses

import torch

from dnmopd.core import inject_constant_advantages, injection_constant, select_injection
from dnmopd.core.statistics import SUM, TOKENS
from dnmopd.kernels import domain_stats
from dnmopd.trainer.experience.collector import Sample
from dnmopd.trainer.injection.bank import InjectionBank
from dnmopd.trainer.measurements.metric_table import MetricTable
from dnmopd.trainer.modes.base import Collected, Mode, StepCounts
from dnmopd.trainer.step.batch import TrainBatch
from dnmopd.trainer.step.objectives import (
    ClippedSurrogate,
    FullVocabReverseKL,
    attach_full_vocab_targets,
    ratio_reference,
)


class OPDMode(Mode):
    metrics = MetricTable(
        ("dn/global_std", "global", "sigma_all: population std of r = log p_teacher - log p_rollout over the "
                                    "batch's valid sampled tokens, all domains pooled."),
        ("dn/global_tokens", "global", "Tokens behind sigma_all."),
        ("dn/{domain}/tokens", "global", "The domain's tokens behind sigma_d."),
        ("dn/{domain}/std", "global", "sigma_d: population std of r over the domain's tokens."),
        ("dn/{domain}/raw_factor", "global", "sigma_all / sigma_d before clipping (1 when undefined)."),
        ("dn/{domain}/factor", "global", "clip(sigma_all / sigma_d, bounds): the DN multiplier measured."),
        ("dn/{domain}/applied", "global", "The multiplier applied to the domain's advantages (method.normalizer."
                                          "multipliers: measured, 1 when observing, constant when fixed or "
                                          "frozen)."),
        ("dn/{domain}/clipped", "global", "1 when the raw factor lay outside the bounds."),
        ("kl/all", "global", "Sampled-token reverse KL estimate E_rollout[log q - log p_teacher] = -mean(r), "
                             "all domains."),
        ("kl/{domain}", "global", "Sampled-token reverse KL estimate of the domain."),
        ("injection/samples", "sum", "Responses replaced by an injected teacher trajectory."),
        ("injection/constant", "global", "c(t), the constant advantage of injected trajectories this update."),
    )

    distills = True

    def __init__(self, ctx):
        super().__init__(ctx)
        self.method = ctx.method
        self.full_vocab = self.config.method.loss.full_vocab
        injection = self.config.method.injection
        self.bank = InjectionBank.load(injection.bank) if injection else None

    # ----------------------------------------------------------------------------------------- the batch
    def collect(self, update: int) -> Collected:
        prompts = self.ctx.next_prompts()  # every rank: the sampler stays at the same position everywhere
        if self.ctx.collector is None:
            return Collected(None)
        experience = self.ctx.collector.collect(prompts, seed_offset=self.ctx.seed_offset(update, len(prompts)))
        samples = experience.samples
        injected = self._inject(samples, update) if self.bank is not None else []
        metrics = experience.metrics()
        if self.bank is not None:
            metrics["injection/samples"] = float(len(injected))
            metrics["injection/constant"] = self._injection_constant(update)
        return Collected(self._batch(samples, injected), metrics, experience.phases)

    def _batch(self, samples: list[Sample], injected: list[int]) -> TrainBatch:
        lengths = [len(s.response_ids) for s in samples]
        targets, applied = self.method.targets([s.domain for s in samples], [s.scores for s in samples], lengths)
        batch = TrainBatch.from_rows([s.prompt.prompt_ids for s in samples], [s.response_ids for s in samples],
                                     [s.rollout_logp for s in samples], targets,
                                     [self.method.domain_index(s.domain) for s in samples])
        if injected:
            batch.injected = torch.zeros(batch.size, dtype=torch.bool)
            batch.injected[injected] = True
        if self.full_vocab:
            attach_full_vocab_targets(batch, applied, [s.hidden_states for s in samples],
                                      self.config.teachers.names())
        return batch

    def _injection_constant(self, update: int) -> float:
        injection = self.config.method.injection
        return injection_constant(update, injection.initial, injection.anneal_updates)

    def _inject(self, samples: list[Sample], update: int) -> list[int]:
        """Replace one response per covered prompt group by the bank's teacher trajectory; returns the rows."""
        if self._injection_constant(update) <= 0:
            return []
        n = self.config.data.samples_per_prompt
        rows = []
        for start in range(0, len(samples), n):
            group = samples[start: start + n]
            entry = self.bank.get(group[0].prompt.prompt_ids)
            if entry is None:
                continue
            if entry.domain != group[0].domain:
                raise ValueError(f"injection bank entry for prompt {group[0].prompt.index} has domain "
                                 f"{entry.domain!r}, the prompt {group[0].domain!r}")
            row = start + select_injection([s.verdict is True for s in group])  # no verdict counts as wrong
            sample = samples[row]
            samples[row] = dataclasses.replace(
                sample, response_ids=list(entry.response_ids), rollout_logp=entry.teacher_logp.clone(),
                finish_reason="stop", scores={name: entry.teacher_logp.clone() for name in sample.scores},
                hidden_states={}, verdict=True)
            rows.append(row)
        return rows

    # ----------------------------------------------------------------------------------------- the loss
    def prepare(self, batch: TrainBatch, update: int, staleness: int) -> dict:
        stats = self.ctx.sum_over_dp(domain_stats(batch.target_logp - batch.rollout_logp, batch.dn_mask,
                                                  batch.domain_ids, len(self.method.domains)))
        weights, diagnostics = self.method.normalizer.from_statistics(stats)
        batch.weights = torch.tensor(weights, dtype=torch.float32)[batch.domain_ids]
        if not self.full_vocab:  # the full-vocab KL is exact at every position: no ratio, no old log-probs
            self._advantages(batch, update, staleness)
        metrics = diagnostics.to_metrics()
        for i, domain in enumerate(self.method.domains):
            if stats[TOKENS, i] > 0:  # sampled-token reverse KL E_rollout[log q - log p_teacher] = -mean(r)
                metrics[f"kl/{domain}"] = float(-stats[SUM, i] / stats[TOKENS, i])
        metrics["kl/all"] = float(-stats[SUM].sum() / stats[TOKENS].sum().clamp(min=1))
        return metrics

    def _advantages(self, batch: TrainBatch, update: int, staleness: int) -> None:
        """A = w_d (log p_teacher - log pi_theta0) with pi_theta0 the current weights' log-probs, computed once
        when the ratio can leave 1 (several steps, an older batch) or when rows take constants (injection);
        otherwise the kernel uses each step's own detached log-probs, which are pi_theta0 in a single step."""
        steps = self.config.train.optimizer_steps_per_update
        if staleness == 0 and steps == 1 and batch.injected is None:
            return
        current = self.ctx.logp(batch)
        advantages = (batch.target_logp - current) * batch.loss_mask
        if batch.injected is not None:
            advantages[batch.injected] = inject_constant_advantages(advantages[batch.injected],
                                                                    self._injection_constant(update))
        batch.advantages = advantages
        batch.old_logp = ratio_reference(batch, staleness, current)

    def objective(self, counts: StepCounts):
        if self.full_vocab:
            return FullVocabReverseKL(self.ctx.head, self.ctx.teacher_heads, num_responses=counts.responses,
                                      domains=self.method.domains)
        loss = self.config.method.loss
        return ClippedSurrogate(self.ctx.head, num_responses=counts.responses, eps_low=loss.eps_low,
                                eps_high=loss.eps_high, dual_clip=loss.dual_clip)

    def state_dict(self) -> dict:
        return {"method": self.method.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.method.load_state_dict(state["method"])
