"""The composition root and the update loop of on-policy distillation (run.mode opd).

One update, in the order of the data flow (`_update`):

    sampler -> rollout -> teacher scoring   (ExperienceCollector, on each model-parallel group's leader)
    -> targets (routing) -> batch broadcast to the model-parallel group
    -> DN statistics all-reduced over data-parallel ranks -> multipliers (Method)
    -> student forward/backward with the fused OPD kernel -> optimizer step (update, objectives)
    -> weight sync to the rollout engine (with a probe) -> metrics -> checkpoint

Every rank runs the same program (SPMD under torchrun). Build order: process groups, student, data,
teachers and rollout (leaders only), method, optimizer, checkpoint resume, metrics.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import torch
import torch.distributed as dist

from dnmopd.config import dump_yaml
from dnmopd.core.statistics import SUM, TOKENS, batch_statistics
from dnmopd.data.chat import PromptTokenizer
from dnmopd.rollout.base import WeightProbe
from dnmopd.student.parallel import init_distributed
from dnmopd.teachers.base import ScoreRequest
from dnmopd.trainer import checkpoint
from dnmopd.trainer.batch import TrainBatch, broadcast_batch
from dnmopd.trainer.collectives import all_reduce_sum, broadcast_tensor
from dnmopd.trainer.config import TrainerConfig, resolve_data_path
from dnmopd.trainer.experience import ExperienceCollector, Sample
from dnmopd.trainer.method import Method
from dnmopd.trainer.metrics import MetricsLogger
from dnmopd.trainer.objectives import ClippedSurrogate, FullVocabReverseKL, LogProbs
from dnmopd.trainer.optimization import build_optimization
from dnmopd.trainer.progress import ProgressDisplay
from dnmopd.trainer.prompts import PromptSet
from dnmopd.trainer.update import StudentForward, logp_matrix, sum_metrics

logger = logging.getLogger(__name__)


class Trainer:
    def __init__(self, config: TrainerConfig):
        self.config = config
        init_distributed()
        torch.manual_seed(config.run.seed)
        self.dims = config.parallel.build()
        self.rank = dist.get_rank()
        self.run_dir = config.run.directory
        mp_ranks = dist.get_process_group_ranks(self.dims.pg.mp)
        self.leader = min(mp_ranks)
        self.is_leader = self.rank == self.leader
        self.dp_rank, self.dp_size = self.dims.dp_group.rank(), self.dims.dp_group.size()
        self._write_resolved_config()

        from dnmopd.student.student import Student

        self.student = Student.from_hf(config.student.hf_path, self.dims, config.student)
        self.tokenizer = PromptTokenizer.from_pretrained(config.student.hf_path)
        self.prompts = PromptSet.load(
            resolve_data_path(config.data.train_file), self.tokenizer, domains=config.data.domains,
            max_prompt_tokens=config.data.max_prompt_tokens, model_vocab=self.student.arch.vocab_size,
            on_bad_row=config.data.on_bad_row)
        self.sampler = config.data.sampler.build(num_prompts=len(self.prompts), dp_rank=self.dp_rank,
                                                 dp_size=self.dp_size)
        self.method = Method(config.method, config.data.domains)
        self.teachers = self._build_teachers() if self.is_leader else {}
        self.collector = self._build_collector() if self.is_leader else None
        steps = config.train.updates * config.train.optimizer_steps_per_update
        self.optimization = build_optimization(self.student, config.optimizer, steps)
        self.forward = StudentForward(self.student, self.optimization.model, config.train.micro_batch_tokens)
        self.start_update = self._resume()
        self.metrics = MetricsLogger(config.logging.metrics, self.run_dir, enabled=self.rank == 0,
                                     resume_step=self.start_update)
        self.progress = ProgressDisplay(config.train.updates, self.start_update, config.data.domains,
                                        enabled=self.rank == 0 and config.logging.progress)
        self.last_metrics: dict[str, float] = {}
        if self.start_update > 0:
            self._sync_weights(None)  # the rollout engine starts from the resumed weights

    # ------------------------------------------------------------------------------------------- building
    def _write_resolved_config(self) -> None:
        if self.rank == 0:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.run_dir / "config.yaml.tmp"
            tmp.write_text(dump_yaml(self.config))
            tmp.replace(self.run_dir / "config.yaml")
        dist.barrier()

    def _build_teachers(self) -> dict:
        from dnmopd.teachers import teacher_class

        full_vocab = self.config.method.loss.kind == "full_vocab_reverse_kl"
        teachers = {}
        for model in self.config.teachers.models:
            options = dataclasses.replace(model.config, return_hidden_states=True) if full_vocab else model.config
            teacher = teacher_class(model.backend)(options)
            teacher.check()
            if teacher.vocab_size < self.student.arch.vocab_size:
                raise ValueError(f"teacher {teacher.name} has vocab {teacher.vocab_size}, smaller than the "
                                 f"student's {self.student.arch.vocab_size}: teachers must share the tokenizer")
            teachers[teacher.name] = teacher
        return teachers

    def _build_collector(self) -> ExperienceCollector:
        from dnmopd.rollout import rollout_class

        engine_config = self.config.rollout.engine
        engine = rollout_class(engine_config.backend)(engine_config.config)
        fleet = self.config.teachers.fleet.build(self.teachers)
        full_vocab = self.config.method.loss.kind == "full_vocab_reverse_kl"
        return ExperienceCollector(engine, fleet, sampling=self.config.rollout.sampling,
                                   samples_per_prompt=self.config.data.samples_per_prompt,
                                   teachers_for=self.method.teachers_needed, return_hidden_states=full_vocab)

    def _resume(self) -> int:
        if not self.config.checkpoint.resume:
            return 0
        latest = checkpoint.latest_checkpoint(self.run_dir)
        if latest is None:
            return 0
        state = checkpoint.load(latest, self.student, self.optimization)
        self.sampler.load_state_dict(state["sampler"])
        self.method.load_state_dict(state["method"])
        self.optimization.load_state_dict(state["optimization"])
        if self.rank == 0:
            logger.info("resumed from %s (update %d)", latest, state["update"])
        return state["update"]

    # ------------------------------------------------------------------------------------------- training
    def train(self) -> None:
        try:
            for update in range(self.start_update, self.config.train.updates):
                metrics = self._update(update)
                self.last_metrics = metrics
                self.metrics.log(update, metrics)
                self.progress.finished(update, metrics)
                done = update + 1
                if done % self.config.checkpoint.save_every == 0 or done == self.config.train.updates:
                    self._phase("checkpoint")
                    self._save(done)
            self._finish()
        finally:
            self.progress.close()
            self.metrics.close()

    def _phase(self, name: str) -> None:
        self.progress.phase(name)

    def _update(self, update: int) -> dict[str, float]:
        timings: dict[str, float] = {}
        start = time.perf_counter()
        self._phase("rollout + teachers")
        batch_prompts = self.sampler.next_batch()
        samples, experience_metrics = self._collect(update, batch_prompts.indices)
        batch = self._batch(samples)
        timings["rollout"] = time.perf_counter() - start

        self._phase("train")
        tick = time.perf_counter()
        stats = all_reduce_sum(batch_statistics(batch.target_logp - batch.rollout_logp, batch.loss_mask,
                                                batch.domain_ids, len(self.method.domains)), self.dims.dp_group)
        weights, diagnostics = self.method.normalizer.from_statistics(stats)
        batch.weights = torch.tensor(weights, dtype=torch.float32)[batch.domain_ids]
        num_responses = int(all_reduce_sum(torch.tensor([batch.size]), self.dims.dp_group).item())
        train_metrics = self._optimize(batch, num_responses)
        timings["train"] = time.perf_counter() - tick

        self._phase("weight sync")
        tick = time.perf_counter()
        self._sync_weights(batch)
        timings["sync"] = time.perf_counter() - tick

        metrics = {**train_metrics, **experience_metrics, **diagnostics.to_metrics()}
        metrics.update(self._kl_metrics(stats))
        metrics.update({f"time/{k}": v for k, v in timings.items()})
        tokens = metrics.get("response_tokens", 0.0)
        metrics["throughput/tokens_per_s"] = tokens / max(time.perf_counter() - start, 1e-9)
        return metrics

    def _collect(self, update: int, indices: list[int]) -> tuple[list[Sample] | None, dict[str, float]]:
        """Rollout and scoring on the leader; returns its samples and the DP-summed experience metrics."""
        counts = torch.zeros(4 + len(self.config.teachers.models), dtype=torch.float64)
        samples = None
        if self.is_leader:
            prompts = [self.prompts[i] for i in indices]
            seed_offset = (update * self.dp_size + self.dp_rank) * len(prompts) * self.config.data.samples_per_prompt
            experience = self.collector.collect(prompts, seed_offset=seed_offset)
            samples = experience.samples
            counts[0] = len(samples)
            counts[1] = sum(len(s.response_ids) for s in samples)
            counts[2] = sum(s.finish_reason == "length" for s in samples)
            counts[3] = experience.rollout_seconds
            for i, model in enumerate(self.config.teachers.models):
                counts[4 + i] = experience.teacher_failures.get(model.config.name, 0)
        counts = all_reduce_sum(counts, self.dims.dp_group)
        metrics = {"response_tokens": counts[1].item(), "response_length/mean": (counts[1] / counts[0]).item(),
                   "truncation_rate": (counts[2] / counts[0]).item(), "time/rollout_and_scoring": counts[3].item()}
        for i, model in enumerate(self.config.teachers.models):
            metrics[f"teacher/{model.config.name}/failures"] = counts[4 + i].item()
        return samples, metrics

    def _batch(self, samples: list[Sample] | None) -> TrainBatch:
        batch = None
        if self.is_leader:
            lengths = [len(s.response_ids) for s in samples]
            targets, _ = self.method.targets([s.domain for s in samples], [s.scores for s in samples], lengths)
            batch = TrainBatch.from_rows([s.prompt.prompt_ids for s in samples], [s.response_ids for s in samples],
                                         [s.rollout_logp for s in samples], targets,
                                         [self.method.domain_index(s.domain) for s in samples])
            if self.config.method.loss.kind == "full_vocab_reverse_kl":
                self._attach_teacher_hidden(batch, samples)
        return broadcast_batch(batch, self.leader, self.dims.pg.mp)

    def _attach_teacher_hidden(self, batch: TrainBatch, samples: list[Sample]) -> None:
        names = list(self.teachers)
        hidden = next(h for s in samples for h in s.hidden_states.values())
        batch.teacher_hidden = torch.zeros(*batch.response_mask.shape, hidden.shape[-1], dtype=hidden.dtype)
        batch.teacher_index = torch.zeros(batch.size, dtype=torch.long)
        for i, sample in enumerate(samples):
            name = self.method.teachers_needed(sample.domain)[0]
            if name in sample.hidden_states:
                batch.teacher_hidden[i, : len(sample.response_ids)] = sample.hidden_states[name]
                batch.teacher_index[i] = names.index(name)

    def _objective(self, num_responses: int):
        loss = self.config.method.loss
        chunk = self.config.train.logit_chunk_tokens
        if loss.kind == "full_vocab_reverse_kl":
            weights = [t.output_weight.detach() for t in self.teachers.values()]
            return FullVocabReverseKL(self.forward.output_chunk, self.dims.pg.tp, weights, num_responses=num_responses,
                                      num_domains=len(self.method.domains), chunk_size=chunk)
        return ClippedSurrogate(self.forward.output_chunk, self.dims.pg.tp, num_responses=num_responses,
                                eps_low=loss.eps_low, eps_high=loss.eps_high, dual_clip=loss.dual_clip,
                                chunk_size=chunk)

    def _optimize(self, batch: TrainBatch, num_responses: int) -> dict[str, float]:
        steps = self.config.train.optimizer_steps_per_update
        if steps > 1:
            batch.old_logp = self._logp(batch)
        rows = batch.size // steps
        domains = len(self.method.domains)
        sizes = {"loss": 1, "rollout_abs_diff": 1, "tokens": 1, "kl_full": domains, "kl_full_tokens": domains}
        totals = {key: torch.zeros(n, dtype=torch.float64) for key, n in sizes.items()}
        grad_norm, skipped = 0.0, 0
        for step in range(steps):
            piece = batch.select(slice(step * rows, (step + 1) * rows)) if steps > 1 else batch
            for chunk in self.optimization.model:
                chunk.train()
            self.optimization.zero_grad()
            outputs = self.forward.run(piece, self._objective(num_responses // steps), forward_only=False)
            applied, norm = self.optimization.step()
            grad_norm, skipped = float(norm or 0.0), skipped + (not applied)
            for key, value in sum_metrics(outputs, sizes, self.dims.pg.pp, self.dims.dp_group).items():
                totals[key] += value
        abs_diff = totals["rollout_abs_diff"] / totals["tokens"].clamp(min=1)
        metrics = {"loss": totals["loss"].item() / steps, "grad_norm": grad_norm, "skipped_steps": float(skipped),
                   "lr": self.optimization.learning_rate(), "train_rollout_logprob_abs_diff": abs_diff.item()}
        for i, domain in enumerate(self.method.domains):
            if totals["kl_full_tokens"][i] > 0:
                metrics[f"kl_full/{domain}"] = (totals["kl_full"][i] / totals["kl_full_tokens"][i]).item()
        return metrics

    def _logp(self, batch: TrainBatch) -> torch.Tensor:
        """[B, T] log-probs of the response tokens under the current weights (on every model-parallel rank)."""
        for chunk in self.optimization.model:
            chunk.eval()
        with torch.no_grad():
            outputs = self.forward.run(batch, LogProbs(self.forward.output_chunk, self.dims.pg.tp,
                                                       chunk_size=self.config.train.logit_chunk_tokens),
                                       forward_only=True)
        logp = logp_matrix(batch, outputs) if self.student.is_last_stage else None
        last = self.dims.pp_global_rank(self.dims.pp_size - 1)
        return broadcast_tensor(logp, tuple(batch.response_mask.shape), torch.float32, last, self.dims.pg.pp) \
            if self.dims.pp_size > 1 else logp

    def _kl_metrics(self, stats: torch.Tensor) -> dict[str, float]:
        """Sampled-token reverse KL to the routed teacher, E_rollout[log q - log p_teacher] = -mean(r)."""
        metrics = {}
        for i, domain in enumerate(self.method.domains):
            if stats[TOKENS, i] > 0:
                metrics[f"kl/{domain}"] = float(-stats[SUM, i] / stats[TOKENS, i])
        metrics["kl/all"] = float(-stats[SUM].sum() / stats[TOKENS].sum().clamp(min=1))
        return metrics

    def _sync_weights(self, batch: TrainBatch | None) -> None:
        """Send the new weights to the leader's rollout engine and verify them with a probe sequence."""
        probe_batch = batch.select(slice(0, 1)) if batch is not None else self._probe_batch()
        expected = self._logp(probe_batch)
        tensors = self.student.hf_tensors(causal_lm_names=self.config.rollout.engine.backend == "inprocess")
        if not self.is_leader:
            for _ in tensors:  # the gather is collective: every model-parallel rank takes part
                pass
            return
        length = int(probe_batch.response_mask[0].sum())
        prompt_len = int(probe_batch.prompt_lens[0])
        token_ids = tuple(probe_batch.tokens[0, : prompt_len + length].tolist())
        probe = WeightProbe(token_ids, prompt_len, expected[0, :length])
        self.collector.engine.update_weights(tensors, probe)

    def _probe_batch(self) -> TrainBatch:
        prompt = self.prompts[0].prompt_ids
        request = ScoreRequest((*prompt, *prompt[:4]), len(prompt))
        return TrainBatch.from_rows([prompt], [request.response_ids], [torch.zeros(request.response_len)],
                                    [torch.zeros(request.response_len)], [0])

    # ------------------------------------------------------------------------------------------- outputs
    def _save(self, update: int) -> None:
        state = {"update": update, "sampler": self.sampler.state_dict(), "method": self.method.state_dict(),
                 "optimization": self.optimization.state_dict()}
        checkpoint.save(self.run_dir, update, self.student, self.optimization, state,
                        self.config.checkpoint.keep_last)

    def _finish(self) -> None:
        if self.config.checkpoint.export_hf:
            self._phase("export")
            from dnmopd.student.release import write_release

            write_release(self.student, self.run_dir / "release", training_config=dump_yaml(self.config),
                          metrics=self.last_metrics, log=logger.info if self.rank == 0 else lambda message: None)
        if self.rank == 0 and self.config.logging.report:
            from dnmopd.trainer.report import draw_report

            draw_report(self.run_dir)

    def close(self) -> None:
        self.dims.destroy()
        if dist.is_initialized():
            dist.destroy_process_group()

