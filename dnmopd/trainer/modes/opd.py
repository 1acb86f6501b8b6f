"""On-policy distillation: rollout -> teacher scoring -> targets (routing) -> DN multipliers -> OPD loss.

With annealed injection, one response of each prompt group found in the injection bank (the first one the
verifier judged wrong, else the first) is replaced by the teacher's trajectory, whose every token then takes
the constant advantage c(t) = c0 * max(0, 1 - t / A) through the same clipped loss.
"""

from __future__ import annotations

import dataclasses

import torch

from dnmopd.core import inject_constant_advantages, injection_constant, select_injection
from dnmopd.core.statistics import SUM, TOKENS, batch_statistics
from dnmopd.student.weights import SafetensorsFolder
from dnmopd.trainer.batch import TrainBatch
from dnmopd.trainer.collectives import all_reduce_sum
from dnmopd.trainer.experience import ExperienceCollector, Sample, rollout_counts
from dnmopd.trainer.injection_bank import InjectionBank
from dnmopd.trainer.method import Method
from dnmopd.trainer.modes.base import Mode, counts_over
from dnmopd.trainer.objectives import ClippedSurrogate, FullVocabReverseKL

OUTPUT_WEIGHT_NAMES = ("lm_head.weight", "model.embed_tokens.weight", "model.language_model.embed_tokens.weight")


def teacher_output_weight(model_path: str) -> torch.Tensor:
    """A Hugging Face teacher's LM-head weight [vocab, hidden] (its input embedding when tied), read alone."""
    folder = SafetensorsFolder(model_path)
    name = next((n for n in OUTPUT_WEIGHT_NAMES if n in folder.file_of), None)
    if name is None:
        raise ValueError(f"{model_path}: no LM head among {OUTPUT_WEIGHT_NAMES}")
    return folder.get(name)


class OPDMode(Mode):
    def __init__(self, trainer):
        super().__init__(trainer)
        method = self.config.method
        self.method = Method(method, self.config.data.domains)
        self.full_vocab = method.loss.kind == "full_vocab_reverse_kl"
        self.bank = InjectionBank.load(method.injection.bank) if method.injection else None
        self.teachers = trainer.build_teachers(return_hidden_states=self.full_vocab) if trainer.is_leader else {}
        # the full-vocab loss needs every teacher's LM head on every rank of the last pipeline stage
        self.teacher_heads = [teacher_output_weight(m.config.model_path) for m in self.config.teachers.models] \
            if self.full_vocab and trainer.student.is_last_stage else []
        self.collector = None
        if trainer.is_leader:
            self.collector = ExperienceCollector(
                trainer.rollout_engine, self.config.teachers.fleet.build(self.teachers),
                sampling=self.config.rollout.sampling, samples_per_prompt=self.config.data.samples_per_prompt,
                teachers_for=self.method.teachers_needed, return_hidden_states=self.full_vocab,
                **trainer.verification())

    # ----------------------------------------------------------------------------------------- the batch
    def collect(self, update: int) -> tuple[TrainBatch | None, dict[str, float]]:
        trainer = self.trainer
        names = self.config.teachers.names()
        batch, counts = None, [0.0] * (5 + 3 * len(names))
        if trainer.is_leader:
            prompts = trainer.next_prompts()
            experience = self.collector.collect(prompts, seed_offset=trainer.seed_offset(update, len(prompts)))
            samples = experience.samples
            injected = self._inject(samples, update) if self.bank is not None else []
            batch = self._batch(samples, injected)
            counts = [*rollout_counts(samples, experience.rollout_seconds), len(injected),
                      *(experience.teacher_failures.get(name, 0) for name in names),
                      *(sum(experience.teacher_seconds.get(name, [])) for name in names),
                      *(len(experience.teacher_seconds.get(name, [])) for name in names)]
        else:
            trainer.next_prompts()  # keep every rank's sampler at the same position
        totals = counts_over(counts, trainer.dims.dp_group)
        metrics = trainer.rollout_metrics(totals[:4])
        if self.bank is not None:
            metrics["injection/samples"] = totals[4].item()
            metrics["injection/constant"] = injection_constant(update, self.config.method.injection.initial,
                                                               self.config.method.injection.anneal_updates)
        k = len(names)
        for i, name in enumerate(names):
            metrics[f"teacher/{name}/failures"] = totals[5 + i].item()
            if totals[5 + 2 * k + i] > 0:  # mean seconds per scoring request, retries included
                metrics[f"teacher/{name}/latency_s"] = (totals[5 + k + i] / totals[5 + 2 * k + i]).item()
        if self.config.rollout.verify:
            metrics.update(trainer.accuracy_metrics(samples if trainer.is_leader else None))
        return batch, metrics

    def _batch(self, samples: list[Sample], injected: list[int]) -> TrainBatch:
        lengths = [len(s.response_ids) for s in samples]
        targets, _ = self.method.targets([s.domain for s in samples], [s.scores for s in samples], lengths)
        batch = TrainBatch.from_rows([s.prompt.prompt_ids for s in samples], [s.response_ids for s in samples],
                                     [s.rollout_logp for s in samples], targets,
                                     [self.method.domain_index(s.domain) for s in samples])
        if injected:
            batch.injected = torch.zeros(batch.size, dtype=torch.bool)
            batch.injected[injected] = True
        if self.full_vocab:
            self._attach_teacher_hidden(batch, samples)
        return batch

    def _attach_teacher_hidden(self, batch: TrainBatch, samples: list[Sample]) -> None:
        names = self.config.teachers.names()
        width = next(h for s in samples for h in s.hidden_states.values()).shape[-1]
        batch.teacher_hidden = torch.zeros(*batch.response_mask.shape, width)
        batch.teacher_index = torch.zeros(batch.size, dtype=torch.long)
        for i, sample in enumerate(samples):
            name = self.method.teachers_needed(sample.domain)[0]
            if name in sample.hidden_states:
                batch.teacher_hidden[i, : len(sample.response_ids)] = sample.hidden_states[name].float()
                batch.teacher_index[i] = names.index(name)

    def _inject(self, samples: list[Sample], update: int) -> list[int]:
        """Replace one response per covered prompt group by the bank's teacher trajectory; returns the rows."""
        injection = self.config.method.injection
        constant = injection_constant(update, injection.initial, injection.anneal_updates)
        if constant <= 0:
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
            row = start + select_injection([s.verdict for s in group])
            sample = samples[row]
            samples[row] = dataclasses.replace(
                sample, response_ids=list(entry.response_ids), rollout_logp=entry.teacher_logp.clone(),
                finish_reason="stop", scores={name: entry.teacher_logp.clone() for name in sample.scores},
                hidden_states={}, verdict=True)
            rows.append(row)
        return rows

    # ----------------------------------------------------------------------------------------- the loss
    def prepare(self, batch: TrainBatch) -> dict[str, float]:
        trainer = self.trainer
        stats = all_reduce_sum(batch_statistics(batch.target_logp - batch.rollout_logp, batch.dn_mask,
                                                batch.domain_ids, len(self.method.domains)), trainer.dims.dp_group)
        weights, diagnostics = self.method.normalizer.from_statistics(stats)
        batch.weights = torch.tensor(weights, dtype=torch.float32)[batch.domain_ids]
        if batch.injected is not None:
            constant = injection_constant(trainer.update, self.config.method.injection.initial,
                                          self.config.method.injection.anneal_updates)
            batch.old_logp = trainer.logp(batch)
            advantages = (batch.target_logp - batch.old_logp) * batch.response_mask
            advantages[batch.injected] = inject_constant_advantages(advantages[batch.injected], constant)
            batch.advantages = advantages
        metrics = diagnostics.to_metrics()
        for i, domain in enumerate(self.method.domains):
            if stats[TOKENS, i] > 0:  # sampled-token reverse KL E_rollout[log q - log p_teacher] = -mean(r)
                metrics[f"kl/{domain}"] = float(-stats[SUM, i] / stats[TOKENS, i])
        metrics["kl/all"] = float(-stats[SUM].sum() / stats[TOKENS].sum().clamp(min=1))
        return metrics

    def objective(self, num_responses: int, num_tokens: int):
        trainer, loss = self.trainer, self.config.method.loss
        chunk = self.config.train.logit_chunk_tokens
        if self.full_vocab:
            return FullVocabReverseKL(trainer.output_chunk, trainer.dims.pg.tp, self.teacher_heads,
                                      num_responses=num_responses,
                                      num_domains=len(self.method.domains), chunk_size=chunk)
        return ClippedSurrogate(trainer.output_chunk, trainer.dims.pg.tp, num_responses=num_responses,
                                eps_low=loss.eps_low, eps_high=loss.eps_high, dual_clip=loss.dual_clip,
                                chunk_size=chunk)

    def state_dict(self) -> dict:
        return {"method": self.method.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.method.load_state_dict(state["method"])
