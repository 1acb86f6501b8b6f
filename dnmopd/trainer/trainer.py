"""The composition root and the update loop shared by every run mode (opd, grpo, sft).

One update, in the order of the data flow (`_update`):

    sampler -> rollout -> teacher scoring / verifiers   (mode.collect, on each model-parallel group's leader)
    -> batch broadcast to the model-parallel group
    -> DN statistics all-reduced over data parallel -> multipliers   (mode.prepare)
    -> student forward/backward with a fused LM-head loss -> optimizer step   (mode.objective, StudentForward)
    -> weight sync to the rollout engine, verified by a probe -> metrics -> checkpoint

Every rank runs the same program (SPMD under torchrun). Build order: process groups, student, prompts, rollout
engine (leaders), mode (teachers, method), optimizer, checkpoint resume, metrics.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import torch
import torch.distributed as dist

from dnmopd.config import dump_yaml
from dnmopd.data.chat import PromptTokenizer
from dnmopd.data.io import atomic_write
from dnmopd.rollout.base import WeightProbe
from dnmopd.student.parallel import init_distributed
from dnmopd.trainer import checkpoint
from dnmopd.trainer.batch import TrainBatch, broadcast_batch
from dnmopd.trainer.collectives import all_reduce_sum, broadcast_tensor
from dnmopd.trainer.config import TrainerConfig, resolve_data_path
from dnmopd.trainer.metrics import MetricsLogger
from dnmopd.trainer.objectives import LogProbs
from dnmopd.trainer.optimization import build_optimization
from dnmopd.trainer.progress import ProgressDisplay
from dnmopd.trainer.prompts import PromptSet
from dnmopd.trainer.update import StudentForward, logp_matrix, sum_metrics

logger = logging.getLogger(__name__)


def _mode_class(name: str):
    from dnmopd.trainer.modes.grpo import GRPOMode
    from dnmopd.trainer.modes.opd import OPDMode
    from dnmopd.trainer.modes.sft import SFTMode

    return {"opd": OPDMode, "grpo": GRPOMode, "sft": SFTMode}[name]


class Trainer:
    def __init__(self, config: TrainerConfig):
        from dnmopd.student.student import Student

        self.config = config
        init_distributed()
        torch.manual_seed(config.run.seed)
        self.dims = config.parallel.build()
        self.rank = dist.get_rank()
        self.world = dist.group.WORLD
        self.run_dir = config.run.directory
        self.leader = min(dist.get_process_group_ranks(self.dims.pg.mp))
        self.is_leader = self.rank == self.leader
        self.dp_rank, self.dp_size = self.dims.dp_group.rank(), self.dims.dp_group.size()
        self.update = 0
        self._write_resolved_config()

        self.student = Student.from_hf(config.student.hf_path, self.dims, config.student)
        self.tokenizer = PromptTokenizer.from_pretrained(config.student.hf_path)
        self.prompts = PromptSet.load(
            resolve_data_path(config.data.train_file), self.tokenizer, domains=config.data.domains,
            max_prompt_tokens=config.data.max_prompt_tokens, model_vocab=self.student.arch.vocab_size,
            on_bad_row=config.data.on_bad_row)
        self.sampler = config.data.sampler.build(num_prompts=len(self.prompts), dp_rank=self.dp_rank,
                                                 dp_size=self.dp_size)
        mode_class = _mode_class(config.run.mode)
        self.rollout_engine = self._build_rollout_engine() if self.is_leader and mode_class.uses_rollout else None
        self.mode = mode_class(self)
        steps = config.train.updates * config.train.optimizer_steps_per_update
        self.optimization = build_optimization(self.student, config.optimizer, steps)
        self.forward = StudentForward(self.student, self.optimization.model, config.train.micro_batch_tokens,
                                      packing=config.train.packing)
        self.start_update = self._resume()
        self.metrics = MetricsLogger(config.logging.metrics, self.run_dir, enabled=self.rank == 0,
                                     resume_step=self.start_update)
        self.progress = ProgressDisplay(config.train.updates, self.start_update, config.data.domains,
                                        enabled=self.rank == 0 and config.logging.progress)
        self.last_metrics: dict[str, float] = {}
        if self.start_update > 0 and self.mode.uses_rollout:
            self._sync_weights(None)  # the rollout engine starts from the resumed weights

    # ------------------------------------------------------------------------------------------- building
    def _write_resolved_config(self) -> None:
        if self.rank == 0:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with atomic_write(self.run_dir / "config.yaml") as f:
                f.write(dump_yaml(self.config))
        dist.barrier()

    def _build_rollout_engine(self):
        from dnmopd.rollout import rollout_class

        engine = self.config.rollout.engine
        return rollout_class(engine.backend)(engine.config)

    def build_teachers(self, *, return_hidden_states: bool = False) -> dict:
        """The run's teachers, checked (health, identity) and vocabulary-compatible with the student."""
        from dnmopd.teachers import teacher_class

        teachers = {}
        for model in self.config.teachers.models:
            options = dataclasses.replace(model.config, return_hidden_states=True) if return_hidden_states \
                else model.config
            teacher = teacher_class(model.backend)(options)
            teacher.check()
            if teacher.vocab_size < self.student.arch.vocab_size:
                raise ValueError(f"teacher {teacher.name} has vocab {teacher.vocab_size}, smaller than the "
                                 f"student's {self.student.arch.vocab_size}: teachers must share the tokenizer")
            teachers[teacher.name] = teacher
        return teachers

    def verification(self, *, required: bool = False) -> dict:
        """ExperienceCollector arguments that judge every response with its domain's verifier."""
        if not (required or self.config.rollout.verify):
            return {}
        from dnmopd.verifiers import verify

        decode = self.tokenizer.tokenizer.decode
        return {"verifier": verify, "decode": lambda ids: decode(ids)}

    def _resume(self) -> int:
        resumed = checkpoint.resume(self.run_dir, self.config.checkpoint.resume, self.student, self.optimization)
        if resumed is None:
            return 0
        latest, state = resumed
        self.sampler.load_state_dict(state["sampler"])
        self.mode.load_state_dict(state["mode"])
        self.optimization.load_state_dict(state["optimization"])
        if self.rank == 0:
            logger.info("resumed from %s (update %d)", latest, state["update"])
        return state["update"]

    # ------------------------------------------------------------------------------------------- services
    @property
    def output_chunk(self):
        return self.forward.output_chunk

    def next_prompts(self) -> list:
        """This rank's prompts of the next rollout batch (every rank advances the sampler)."""
        return [self.prompts[i] for i in self.sampler.next_batch().indices]

    def seed_offset(self, draw: int, prompts: int) -> int:
        """Sample-seed offset of this rank's `draw`-th rollout batch: distinct over draws and ranks, and the
        same after a resume."""
        return (draw * self.dp_size + self.dp_rank) * prompts * self.config.data.samples_per_prompt

    def rollout_metrics(self, totals: torch.Tensor) -> dict[str, float]:
        """From DP-summed `experience.rollout_counts`."""
        responses = totals[0].clamp(min=1)
        return {"response_tokens": totals[1].item(), "response_length/mean": (totals[1] / responses).item(),
                "truncation_rate": (totals[2] / responses).item(), "time/rollout_and_scoring": totals[3].item()}

    def accuracy_metrics(self, samples) -> dict[str, float]:
        """Verifier accuracy per domain (no-verdict responses counted apart); every rank calls it."""
        domains = self.config.data.domains
        counts = torch.zeros(3, len(domains), dtype=torch.float64)
        for sample in samples or []:
            column = domains.index(sample.domain)
            counts[0, column] += 1
            counts[1, column] += sample.verdict is True
            counts[2, column] += sample.verdict is None
        counts = all_reduce_sum(counts, self.dims.dp_group)
        metrics = {}
        for i, domain in enumerate(domains):
            if counts[0, i] > 0:
                metrics[f"accuracy/{domain}"] = (counts[1, i] / counts[0, i]).item()
                metrics[f"no_verdict/{domain}"] = counts[2, i].item()
        return metrics

    def logp(self, batch: TrainBatch) -> torch.Tensor:
        """[B, T] log-probs of the response tokens under the current weights, on every model-parallel rank."""
        for chunk in self.optimization.model:
            chunk.eval()
        with torch.no_grad():
            outputs = self.forward.run(batch, LogProbs(self.output_chunk, self.dims.pg.tp,
                                                       chunk_size=self.config.train.logit_chunk_tokens),
                                       forward_only=True)
        logp = logp_matrix(batch, outputs) if self.student.is_last_stage else None
        if self.dims.pp_size == 1:
            return logp
        last = self.dims.pp_global_rank(self.dims.pp_size - 1)
        return broadcast_tensor(logp, tuple(batch.response_mask.shape), torch.float32, last, self.dims.pg.pp)

    # ------------------------------------------------------------------------------------------- training
    def train(self) -> None:
        try:
            for update in range(self.start_update, self.config.train.updates):
                self.update = update
                metrics = self._update(update)
                self.last_metrics = metrics
                self.metrics.log(update, metrics)
                self.progress.finished(update, metrics)
                done = update + 1
                if done % self.config.checkpoint.save_every == 0 or done == self.config.train.updates:
                    self.progress.phase("checkpoint")
                    self._save(done)
            self._finish()
        finally:
            self.progress.close()
            self.metrics.close()

    def _update(self, update: int) -> dict[str, float]:
        timings: dict[str, float] = {}
        start = time.perf_counter()
        self.progress.phase("rollout + scoring")
        batch, metrics = self.mode.collect(update)
        batch = broadcast_batch(batch, self.leader, self.dims.pg.mp)
        timings["rollout"] = time.perf_counter() - start

        self.progress.phase("train")
        tick = time.perf_counter()
        metrics.update(self.mode.prepare(batch))
        metrics.update(self._optimize(batch))
        timings["train"] = time.perf_counter() - tick

        if self.mode.uses_rollout:
            self.progress.phase("weight sync")
            tick = time.perf_counter()
            self._sync_weights(batch)
            timings["sync"] = time.perf_counter() - tick
        metrics.update({f"time/{k}": v for k, v in timings.items()})
        metrics["throughput/tokens_per_s"] = metrics.get("response_tokens", 0.0) / (time.perf_counter() - start)
        return metrics

    def _optimize(self, batch: TrainBatch) -> dict[str, float]:
        steps = self.config.train.optimizer_steps_per_update
        if batch.size < steps:
            raise RuntimeError(f"this rank has {batch.size} responses for train.optimizer_steps_per_update={steps}")
        rows = -(-batch.size // steps)
        domains = len(self.config.data.domains)
        sizes = {"loss": 1, "rollout_abs_diff": 1, "tokens": 1, "kl_full": domains, "kl_full_tokens": domains}
        totals = {key: torch.zeros(n, dtype=torch.float64) for key, n in sizes.items()}
        grad_norm, skipped = 0.0, 0
        for step in range(steps):
            piece = batch.select(slice(step * rows, (step + 1) * rows))
            counts = all_reduce_sum(torch.tensor([piece.size, int(piece.loss_mask.sum())]), self.dims.dp_group)
            for chunk in self.optimization.model:
                chunk.train()
            self.optimization.zero_grad()
            objective = self.mode.objective(int(counts[0]), int(counts[1]))
            outputs = self.forward.run(piece, objective, forward_only=False)
            applied, norm = self.optimization.step()
            grad_norm, skipped = float(norm or 0.0), skipped + (not applied)
            for key, value in sum_metrics(outputs, sizes, self.dims.pg.pp, self.dims.dp_group).items():
                totals[key] += value
        metrics = {"loss": totals["loss"].item(), "grad_norm": grad_norm, "skipped_steps": float(skipped),
                   "lr": self.optimization.learning_rate()}
        if self.mode.uses_rollout:  # how far the trainer's log-probs are from the rollout engine's
            abs_diff = totals["rollout_abs_diff"] / totals["tokens"].clamp(min=1)
            metrics["train_rollout_logprob_abs_diff"] = abs_diff.item()
        for i, domain in enumerate(self.config.data.domains):
            if totals["kl_full_tokens"][i] > 0:
                metrics[f"kl_full/{domain}"] = (totals["kl_full"][i] / totals["kl_full_tokens"][i]).item()
        if totals["kl_full_tokens"].sum() > 0:
            metrics["kl_full/all"] = (totals["kl_full"].sum() / totals["kl_full_tokens"].sum()).item()
        return metrics

    def _sync_weights(self, batch: TrainBatch | None) -> None:
        """Send the new weights to the rollout engine and verify them with a probe sequence. An in-process engine
        is each leader's own; server engines are shared by all data-parallel replicas, so only the first one
        updates them and every rank waits for it."""
        shared = self.config.rollout.engine.backend != "inprocess"
        if not shared or self.dp_rank == 0:
            self._send_weights(batch)
        if shared:
            dist.barrier()

    def _send_weights(self, batch: TrainBatch | None) -> None:
        probe_batch = batch.select(slice(0, 1)) if batch is not None and batch.size else self._probe_batch()
        expected = self.logp(probe_batch)
        tensors = self.student.hf_tensors(causal_lm_names=self.config.rollout.engine.backend == "inprocess")
        if not self.is_leader:
            for _ in tensors:  # the gather is collective: every model-parallel rank takes part
                pass
            return
        length = int(probe_batch.response_mask[0].sum())
        prompt_len = int(probe_batch.prompt_lens[0])
        token_ids = tuple(probe_batch.tokens[0, : prompt_len + length].tolist())
        self.rollout_engine.update_weights(tensors, WeightProbe(token_ids, prompt_len, expected[0, :length]))

    def _probe_batch(self) -> TrainBatch:
        prompt = list(self.prompts[0].prompt_ids)
        response = prompt[-4:]
        zeros = torch.zeros(len(response))
        return TrainBatch.from_rows([prompt], [response], [zeros], [zeros], [0])

    # ------------------------------------------------------------------------------------------- outputs
    def _save(self, update: int) -> None:
        state = {"update": update, "sampler": self.sampler.state_dict(), "mode": self.mode.state_dict(),
                 "optimization": self.optimization.state_dict()}
        checkpoint.save(self.run_dir, update, self.student, self.optimization, state,
                        self.config.checkpoint.keep_last)

    def _finish(self) -> None:
        if self.config.checkpoint.export_hf:
            self.progress.phase("export")
            from dnmopd.student.release import write_release

            updates = self.config.train.updates
            write_release(self.student, self.run_dir / "release", training_config=dump_yaml(self.config),
                          metrics=self.last_metrics, card=self.config.checkpoint.release,
                          source=f"the trained model in memory at the end of the run (update {updates} of {updates})",
                          log=logger.info if self.rank == 0 else lambda message: None)
        if self.rank == 0 and self.config.logging.report:
            from dnmopd.trainer.report import draw_report

            draw_report(self.run_dir)

    def close(self) -> None:
        self.mode.close()
        self.dims.destroy()
        if dist.is_initialized():
            dist.destroy_process_group()
