"""On-policy distillation: rollout -> teacher scoring -> targets (routing) -> DN multipliers -> OPD loss.

With annealed injection, one response of each prompt group found in the injection bank (the first one the
verifier judged wrong or could not judge, else the first) is replaced by the teacher's trajectory, whose
every token then takes the constant advantage c(t) = c0 * max(0, 1 - t / A) through the same clipped loss.

With `method.loss.kind: full_vocab_reverse_kl` each response distills from its routed teacher's whole
distribution (label, single, and dynamic routing's per-response teacher) or, for pool routing, from the
uniform mixture of all teachers' distributions; in-process teachers return the hidden states it needs. With
`topk_reverse_kl` it distills from its routed teacher's top-k tokens and a tail bucket (every teacher returns
its top-k with its scores, servers included).

Every update also reports each domain's share of the batch's tokens, of the advantage magnitude and of the
gradient (`share/*`), the quantities behind both DN's and the token_share rule's rescaling (docs/methods.md).
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
    TopKReverseKL,
    attach_full_vocab_targets,
    attach_topk_targets,
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
        ("dn/{domain}/share_factor", "global", "clip(target share / observed token share, bounds): the multiplier "
                                               "the token_share rule (Open-MOPD's M1) measures for the domain "
                                               "(applied with method.normalizer.multipliers token_share)."),
        ("share/tokens/{domain}", "global", "The domain's share of the batch's response tokens with a valid score "
                                            "(the tokens behind sigma_d; token_share's observed share)."),
        ("share/advantage/{domain}", "global", "The domain's share of sum |r| over those tokens, r = log p_teacher - "
                                               "log p_rollout: the advantage magnitude before multipliers and the "
                                               "loss's reduction."),
        ("share/gradient/{domain}", "global", "The domain's share of sum w_d |r_t| / n_r (n_r: the response's "
                                              "tokens): the L1 norm of the sampled-token loss's gradient with "
                                              "respect to the tokens' log-probs at ratio 1 (the weight each "
                                              "token's score function gets in the update), multipliers and "
                                              "response-mean reduction included."),
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
        self.topk = self.config.method.loss.teacher_topk
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
        if self.topk:
            attach_topk_targets(batch, applied, [s.topk for s in samples], self.topk)
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
        log_ratio = batch.target_logp - batch.rollout_logp
        num_domains = len(self.method.domains)
        local = torch.cat([domain_stats(log_ratio, batch.dn_mask, batch.domain_ids, num_domains),
                           magnitude_sums(log_ratio, batch.dn_mask, batch.domain_ids, num_domains)])
        reduced = self.ctx.sum_over_dp(local)  # one all-reduce for the DN statistics and the shares
        stats, magnitudes = reduced[:4], reduced[4:]
        weights, diagnostics = self.method.normalizer.from_statistics(stats)
        batch.weights = torch.tensor(weights, dtype=torch.float32)[batch.domain_ids]
        if self.config.method.loss.kind == "sampled_token":  # the KL losses are exact at every position they
            self._advantages(batch, update, staleness)      # cover: no ratio, no old log-probs
        metrics = diagnostics.to_metrics()
        for i, domain in enumerate(self.method.domains):
            if stats[TOKENS, i] > 0:  # sampled-token reverse KL E_rollout[log q - log p_teacher] = -mean(r)
                metrics[f"kl/{domain}"] = float(-stats[SUM, i] / stats[TOKENS, i])
        metrics["kl/all"] = float(-stats[SUM].sum() / stats[TOKENS].sum().clamp(min=1))
        gradient = magnitudes[1] * torch.tensor(weights, dtype=torch.float64)
        for name, values in (("tokens", stats[TOKENS]), ("advantage", magnitudes[0]), ("gradient", gradient)):
            total = float(values.sum())
            if total > 0:
                metrics.update({f"share/{name}/{domain}": float(values[i]) / total
                                for i, domain in enumerate(self.method.domains)})
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
        if self.topk:
            return TopKReverseKL(self.ctx.head, num_responses=counts.responses, domains=self.method.domains)
        loss = self.config.method.loss
        return ClippedSurrogate(self.ctx.head, num_responses=counts.responses, eps_low=loss.eps_low,
                                eps_high=loss.eps_high, dual_clip=loss.dual_clip)

    def state_dict(self) -> dict:
        return {"method": self.method.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.method.load_state_dict(state["method"])


def magnitude_sums(log_ratio: torch.Tensor, mask: torch.Tensor, domain_ids: torch.Tensor,
                   num_domains: int) -> torch.Tensor:
    """float64 (2, D) per domain: sum |r| over the masked tokens, and sum |r| / n_r (n_r: the tokens of the
    token's response), the response-mean reduction's weight of each token."""
    magnitude = torch.where(mask, log_ratio.abs(), 0.0).double()
    per_response = torch.stack([magnitude.sum(1), magnitude.sum(1) / mask.sum(1).clamp(min=1)])
    return torch.zeros(2, num_domains, dtype=torch.float64).index_add_(1, domain_ids, per_response)
