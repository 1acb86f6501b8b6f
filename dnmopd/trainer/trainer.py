"""The composition root and the update loop shared by every run mode (opd, grpo, sft).

One update, in the order of the data flow (`_update`):

    sampler -> rollout -> teacher scoring / verifiers          mode.collect on each model-parallel leader, now or
                                                               (train.rollout_ahead 1) during the previous update
    -> batch broadcast to the model-parallel group
    -> DN statistics all-reduced over data parallel -> multipliers, advantages, old log-probs   (mode.prepare)
    -> student forward/backward with a fused LM-head loss -> optimizer step(s)   (mode.objective, StudentForward)
    -> the fixed probe set's exact KL to the teachers (logging.probe_every; measurements/)
    -> the batch collected ahead finishes -> weight sync to the rollout engine, verified by a probe
    -> metrics reduced by name over data parallel (+ the update's timeline)
    -> evaluation by the synced rollout engine (eval:; measurements/) -> checkpoint

Modes see the run only through a `ModeContext` (`context`); the trainer owns the services behind it (sampler,
rollout engine, method, teachers, verifiers, experience collector, student forward, collectives) and builds
them from what the mode class declares (`uses_rollout`, `distills`, `verifies`), and closes them. Extension
points: a measurement joins the update's metrics in `_update` (declare its names in a MetricTable and add the
table to `metric_table`); a measurement of the updated weights joins `Measurements` (`measurements/schedule`):
after the optimizer steps for the student's weights, after the weight sync for the rollout engine's.

Every rank runs the same program (SPMD under torchrun). Build order: process groups, the run folder's lock
(run_lock), the checkpoint to resume and the check of what it was trained on (manifest), student, prompts and
sampler, rollout engine (leaders), method, teachers and verifiers (leaders), teacher LM heads (last stage,
full-vocabulary loss or probe), mode over its collector, optimizer, rollout ahead, measurements, resume, the
rollout servers' check (resumed: their weight sync), the fixed probe (initial student's), metrics.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import torch
import torch.distributed as dist

from dnmopd.config import dump_yaml
from dnmopd.data.chat import PromptTokenizer
from dnmopd.data.prompts import load_run_prompts
from dnmopd.hf.models import teacher_output_weight
from dnmopd.io import atomic_write, disk_errors
from dnmopd.logs import timed
from dnmopd.rollout import rollout_class
from dnmopd.rollout.base import WeightProbe
from dnmopd.student.parallel import init_distributed
from dnmopd.student.student import Student
from dnmopd.teachers import teacher_class
from dnmopd.teachers.self_test import SelfTestResult, TeacherSelfTestError, self_test
from dnmopd.trainer import checkpoint
from dnmopd.trainer.collectives import all_reduce_max, all_reduce_sum, broadcast_tensor
from dnmopd.trainer.config import TrainerConfig
from dnmopd.trainer.context import Layout, ModeContext
from dnmopd.trainer.experience.collector import EXPERIENCE_METRICS, ExperienceCollector
from dnmopd.trainer.experience.verification import Verification
from dnmopd.trainer.manifest import check_resume
from dnmopd.trainer.measurements.evaluation import TrainingEvaluation
from dnmopd.trainer.measurements.metric_table import MetricTable, reduce_metrics
from dnmopd.trainer.measurements.metrics import MetricsLogger
from dnmopd.trainer.measurements.probe import PROBE_METRICS, build_probe, split_prompts
from dnmopd.trainer.measurements.progress import ProgressDisplay, run_summary
from dnmopd.trainer.measurements.schedule import Measurements
from dnmopd.trainer.method import Method
from dnmopd.trainer.modes.base import StepCounts, mode_class
from dnmopd.trainer.rollout_ahead import RolloutAhead
from dnmopd.trainer.run_lock import RunLock
from dnmopd.trainer.step.batch import TrainBatch, broadcast_batch
from dnmopd.trainer.step.forward_backward import StudentForward, logp_matrix, sum_metrics
from dnmopd.trainer.step.objectives import OBJECTIVE_METRICS, LMHead, LogProbs
from dnmopd.trainer.step.optimization import build_optimization

logger = logging.getLogger(__name__)

PHASES = ("rollout", "scoring", "wait", "train", "probe", "sync")
LOOP_METRICS = MetricTable(
    ("grad_norm", "global", "Global gradient norm of the update's last optimizer step, before clipping."),
    ("skipped_steps", "global", "Optimizer steps of the update skipped (non-finite gradients)."),
    ("lr", "global", "Learning rate after the update."),
    ("throughput/tokens_per_s", "global", "Response tokens per second of the update's wall time (from taking "
                                          "its batch to the end of its weight sync)."),
    ("rollout/staleness", "global", "Optimizer updates between the weights that generated the batch and those "
                                    "that train on it: 0 on-policy, 1 for a batch collected ahead."),
    ("time/checkpoint", "max", "Seconds of saving the checkpoint after the update (absent when none was saved)."),
    ("time/{phase}", "max", "Seconds of a phase of the update's batch: rollout (generation), scoring (teacher "
                            "scoring and verification, overlapping the rollout), wait (training waiting for the "
                            "batch collected ahead), train (prepare + optimizer steps), probe (the "
                            "fixed probe set's measurement), sync (weight sync)."),
    ("timeline/{phase}/start", "min", "Wall-clock start of the phase (Unix seconds; the checkpoint's too); a batch "
                                      "collected ahead has its rollout and scoring within the previous update's "
                                      "train."),
    ("timeline/{phase}/end", "max", "Wall-clock end of the phase (Unix seconds)."),
)


def phase_metrics(phases: dict[str, tuple[float, float]]) -> dict[str, float]:
    metrics = {}
    for phase, (start, end) in phases.items():
        metrics.update({f"time/{phase}": end - start, f"timeline/{phase}/start": start,
                        f"timeline/{phase}/end": end})
    return metrics


class Trainer:
    def __init__(self, config: TrainerConfig):
        self.config = config
        init_distributed()
        try:
            with timed(logger, "start-up (student, data, rollout engine, teachers)"):
                self._build(config)
        except BaseException:
            self.close()  # a refused start-up leaves no process group, parallel state or engine behind
            raise

    def _build(self, config: TrainerConfig) -> None:
        if not torch.cuda.is_available():
            # megatron's torch.compile'd fusions only cost compile time on a CPU, and compiling while an
            # in-process rollout generates in another thread (train.rollout_ahead 1) changes its floats
            torch._dynamo.config.disable = True
        torch.manual_seed(config.run.seed)
        self.dims = config.parallel.build()
        self.rank = dist.get_rank()
        self.run_dir = config.run.directory
        self.leader = min(dist.get_process_group_ranks(self.dims.pg.mp))
        self.is_leader = self.rank == self.leader
        self.dp_rank, self.dp_size = self.dims.dp_group.rank(), self.dims.dp_group.size()
        self.collection_group = dist.new_group(backend="gloo")  # collection-time agreement, any thread
        self.lock = RunLock.take(self.run_dir)
        self.resume_from = checkpoint.find(self.run_dir, config.checkpoint.resume)
        self.manifest = check_resume(config, self.resume_from)
        self._write_resolved_config()

        self.student = Student.from_hf(config.student.hf_path, self.dims, config.student)
        self.tokenizer = PromptTokenizer.from_pretrained(config.student.hf_path)
        self.layout = Layout(self.rank, self.is_leader, self.student.is_last_stage, self.dp_rank, self.dp_size)
        vocab = self.student.arch.vocab_size

        def load_prompts(path):
            return load_run_prompts(path, self.tokenizer, config.data, model_vocab=vocab)

        self.prompts = load_prompts(config.data.train_file)
        probing = bool(config.logging.probe_every) and config.run.mode == "opd"
        if probing:  # before the sampler: held-out probe prompts are never drawn
            probe_prompts, self.prompts = split_prompts(config.logging.probe, self.prompts, config.data.domains,
                                                        load=load_prompts)
        self.sampler = config.data.sampler.build(num_prompts=len(self.prompts), dp_rank=self.dp_rank,
                                                 dp_size=self.dp_size)
        mode = mode_class(config.run.mode)
        self.rollout_backend = rollout_class(config.rollout.engine.backend)
        self.rollout_engine = self.rollout_backend(config.rollout.engine.config) \
            if self.is_leader and mode.uses_rollout else None
        self.method = Method(config.method, config.data.domains) if mode.distills else None
        self.teachers = self._build_teachers(mode.distills)
        if self.manifest is not None:  # rank 0's: each checkpoint records what its teachers' self-test measured
            self.manifest["teacher_self_test"] = {name: result.to_dict()
                                                  for name, result in self.teacher_self_test.items()}
        verify = mode.verifies or (mode.uses_rollout and config.rollout.verify)
        self.verification = Verification(config.verifiers, {p.domain for p in self.prompts.prompts}) \
            if verify and self.is_leader else None
        full_vocab = mode.distills and config.method.loss.full_vocab
        teacher_heads = [teacher_output_weight(m.config.model_path) for m in config.teachers.models] \
            if (full_vocab or probing) and self.student.is_last_stage else []
        temperature = config.rollout.sampling.temperature if mode.uses_rollout else 1.0
        self.head = LMHead(self.student.chunks[-1], self.dims.pg.tp, config.train.logit_chunk_tokens, temperature)
        self.mode = mode(self._context(self._collector() if mode.uses_rollout else None,
                                       teacher_heads if full_vocab else []))
        steps = config.train.updates * config.train.optimizer_steps_per_update
        self.optimization = build_optimization(self.student, config.optimizer, steps)
        self.forward = StudentForward(self.student, self.optimization.model, config.train.micro_batch_tokens,
                                      packing=config.train.packing)
        self.metric_table = LOOP_METRICS | EXPERIENCE_METRICS | OBJECTIVE_METRICS | PROBE_METRICS | mode.metrics
        self.rollout_ahead = RolloutAhead(self.mode.collect, ahead=config.train.rollout_ahead)
        self.measurements = Measurements(TrainingEvaluation(config, run_dir=self.run_dir, tokenizer=self.tokenizer,
                                                            engine=self.rollout_engine, rank=self.rank,
                                                            model_vocab=vocab))
        self.start_update, checkpoint_metrics = self._resume()
        if mode.uses_rollout:
            self._start_rollout_engine()
        if probing:
            self.measurements.probe = build_probe(
                config, self.run_dir, resumed_at=self.start_update, layout=self.layout, dims=self.dims,
                vocab_size=vocab, prompts=probe_prompts, engine=self.rollout_engine, teachers=self.teachers,
                method=self.method, teacher_heads=teacher_heads, head=self.head, forward=self.forward)
        self.metrics = MetricsLogger(config.logging.metrics, self.run_dir, enabled=self.rank == 0,
                                     resume_step=self.start_update)
        self.progress = ProgressDisplay(config.train.updates, self.start_update, config.data.domains,
                                        enabled=self.rank == 0 and config.logging.progress)
        if checkpoint_metrics is not None:
            self.metrics.restore(self.start_update - 1, checkpoint_metrics)
        self.last_metrics: dict[str, float] = self.metrics.resumed  # rank 0's; a finished run's re-run keeps them

    # ------------------------------------------------------------------------------------------- building
    def _write_resolved_config(self) -> None:
        if self.rank == 0:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with atomic_write(self.run_dir / "config.yaml") as f:
                f.write(dump_yaml(self.config))
        dist.barrier()

    def _start_rollout_engine(self) -> None:
        """A fresh run checks its servers (healthy, serving the initial student); under rollout.sync distributed the
        sending leader then forms the weight-update group with them; a resumed run sends them the resumed weights,
        which loads (or broadcasts) and probes every replica whatever an earlier trainer left it serving."""
        rollout = self.config.rollout
        if self.rollout_backend.shared_across_ranks and rollout.sender_dp_rank >= self.dp_size:
            raise ValueError(f"rollout.sender_dp_rank={rollout.sender_dp_rank}: the run has {self.dp_size} "
                             "data-parallel ranks")

        def start() -> None:
            if self.rollout_engine is None:
                return
            if self.start_update == 0:
                self.rollout_engine.check()
            if rollout.sync == "distributed" and self._sends_weights:
                self.rollout_engine.join_weight_group(rollout.distributed)

        self._on_every_rank(start)
        if self.start_update > 0:
            self._sync_weights(None, version=self.start_update)

    @property
    def _sends_weights(self) -> bool:
        """This rank's model-parallel group sends the weights to the rollout engine: its own engine, or, for servers
        shared by every data-parallel rank, the group of rank `rollout.sender_dp_rank`."""
        return not self.rollout_backend.shared_across_ranks or self.dp_rank == self.config.rollout.sender_dp_rank

    def _on_every_rank(self, action):
        """Run this rank's part of a start-up step; when it fails on any rank, fail on every rank (no rank is left
        waiting in a collective for one that stopped). Returns `action()`."""
        error, result = None, None
        try:
            result = action()
        except Exception as failure:  # noqa: BLE001 - re-raised below, after every rank knows
            error = failure
        if self._any_rank(error is not None):
            if error is not None:
                raise error
            raise RuntimeError("a start-up step failed on another rank (that rank's error names the cause)")
        return result

    def _context(self, collector: ExperienceCollector | None, teacher_heads: list[torch.Tensor]) -> ModeContext:
        return ModeContext(
            config=self.config, layout=self.layout, run_dir=self.run_dir, tokenizer=self.tokenizer,
            prompts=self.prompts, head=self.head, method=self.method, teacher_heads=teacher_heads,
            next_prompts=self._next_prompts, collector=collector, any_rank=self._any_rank,
            sum_over_dp=lambda values: all_reduce_sum(values, self.dims.dp_group),
            logp=lambda batch: self._logp(batch, self.head), run_once=self._run_once)

    def _next_prompts(self) -> list:
        return [self.prompts[i] for i in self.sampler.next_batch().indices]

    def _any_rank(self, flag: bool) -> bool:
        return bool(all_reduce_max(torch.tensor([float(flag)]), self.collection_group).item())

    def _run_once(self, fn) -> None:
        if self.rank == 0:
            fn()
        dist.barrier()

    def _collector(self) -> ExperienceCollector | None:
        """This leader's collector over its rollout engine, the method's teachers and the verifiers; None off the
        model-parallel leaders."""
        if not self.is_leader:
            return None
        config = self.config
        verification = {}
        if self.verification is not None:
            decode = self.tokenizer.tokenizer.decode
            verification = {"verifier": self.verification.verdict, "decode": lambda ids: decode(ids)}
        return ExperienceCollector(self.rollout_engine, config.teachers.fleet.build(self.teachers) if self.teachers
                                   else None, sampling=config.rollout.sampling,
                                   samples_per_prompt=config.data.samples_per_prompt,
                                   teachers_for=self.method.teachers_needed if self.method else lambda domain: (),
                                   return_hidden_states=config.method.loss.full_vocab and self.method is not None,
                                   teacher_topk=config.method.loss.teacher_topk if self.method else 0,
                                   **verification)

    def _build_teachers(self, distills: bool) -> dict:
        """The run's teachers (when the mode `distills`) on the model-parallel leaders: checked (health,
        identity), vocabulary-compatible with the student and, unless `teachers.self_test` is false, self-tested
        (the results are `teacher_self_test`); with hidden states when the method's loss needs the teachers' full
        distributions. A teacher refused on any rank stops every rank."""
        hidden_states = self.config.method.loss.full_vocab
        teachers: dict = {}
        self.teacher_self_test: dict[str, SelfTestResult] = {}
        if not distills:
            return teachers

        def build() -> None:
            if not self.is_leader:
                return
            for model in self.config.teachers.models:
                options = dataclasses.replace(model.config, return_hidden_states=True) if hidden_states \
                    else model.config
                teacher = teacher_class(model.backend)(options)
                teachers[teacher.name] = teacher
                teacher.check()
                if teacher.vocab_size < self.student.arch.vocab_size:
                    raise ValueError(f"teacher {teacher.name} has vocab {teacher.vocab_size}, smaller than the "
                                     f"student's {self.student.arch.vocab_size}: teachers must share the tokenizer")
                if self.config.teachers.self_test:
                    result = self_test(teacher, teacher_path=model.config.model_path, student=self.tokenizer,
                                       student_vocab=self.student.arch.vocab_size)
                    self.teacher_self_test[teacher.name] = result
                    if not result.passed:
                        raise TeacherSelfTestError(result)
                    if self.rank == 0:
                        logger.info(result.summary())

        try:
            self._on_every_rank(build)
        except BaseException:
            for teacher in teachers.values():
                teacher.close()
            raise
        return teachers

    def _resume(self) -> tuple[int, dict[str, float] | None]:
        """Load the checkpoint to resume from, if any; returns the updates done and the metrics of the last one
        (None where the checkpoint has none)."""
        latest = self.resume_from
        if latest is None:
            return 0, None
        state = checkpoint.load(latest, self.student, self.optimization)
        self.sampler.load_state_dict(state["sampler"])
        self.mode.load_state_dict(state["mode"])
        self.optimization.load_state_dict(state["optimization"])
        local = checkpoint.load_local(latest) or {}
        if local:
            self.rollout_ahead.load_state_dict(local.get("rollout_ahead", local.get("pipeline")))  # older: "pipeline"
        if self.rank == 0:
            logger.info("resumed from %s (update %d)", latest, state["update"])
        return state["update"], local.get("metrics")

    # ------------------------------------------------------------------------------------------- services
    def _logp(self, batch: TrainBatch, head: LMHead) -> torch.Tensor:
        """[B, T] log-probs of the response tokens under the current weights, on every model-parallel rank."""
        for chunk in self.optimization.model:
            chunk.eval()
        with torch.no_grad():
            outputs = self.forward.run(batch, LogProbs(head), forward_only=True)
        logp = logp_matrix(batch, outputs) if self.student.is_last_stage else None
        if self.dims.pp_size == 1:
            return logp
        last = self.dims.pp_global_rank(self.dims.pp_size - 1)
        return broadcast_tensor(logp, tuple(batch.response_mask.shape), torch.float32, last, self.dims.pg.pp)

    # ------------------------------------------------------------------------------------------- training
    def train(self) -> None:
        started = time.time()
        try:
            for update in range(self.start_update, self.config.train.updates):
                metrics = self._update(update)
                metrics.update(self.measurements.after_sync(update, self.progress))
                done = update + 1
                if done % self.config.checkpoint.save_every == 0 or done == self.config.train.updates:
                    self.progress.phase("checkpoint")
                    metrics.update(self._save(done, metrics))
                self.last_metrics = metrics
                with disk_errors(self.metrics.path, "the metrics"):
                    self.metrics.log(update, metrics)
                self.progress.finished(update, metrics)
            self.progress.close()
            self._finish(started)
        finally:
            self.progress.close()
            self.metrics.close()

    def _update(self, update: int) -> dict[str, float]:
        started = time.time()
        self.progress.phase("rollout + scoring")
        collected = self.rollout_ahead.take(update)
        if self.rollout_ahead.ahead and update + 1 < self.config.train.updates:
            self.rollout_ahead.prefetch(update + 1)  # generated by the current weights while they train
        batch = broadcast_batch(collected.batch, self.leader, self.dims.pg.mp)
        staleness = update - collected.policy_version if self.mode.uses_rollout else 0
        phases, metrics = dict(collected.phases), dict(collected.metrics)

        self.progress.phase("train, next batch generating" if self.rollout_ahead.ahead else "train")
        tick = time.time()
        metrics.update(self.mode.prepare(batch, update, staleness))
        metrics.update(self._optimize(batch))
        phases["train"] = (tick, time.time())
        metrics.update(self.measurements.after_training(update, self.progress, phases))

        if self.mode.uses_rollout:
            self.progress.phase("next batch" if self.rollout_ahead.ahead else "weight sync")
            self.rollout_ahead.drain()  # the batch collected ahead must be done before the weights change
            self.progress.phase("weight sync")
            tick = time.time()
            self._sync_weights(batch, version=update + 1)
            phases["sync"] = (tick, time.time())
        metrics.update(phase_metrics(phases))
        reduced = reduce_metrics(metrics, self.metric_table, self.dims.dp_group)
        if self.mode.uses_rollout:
            reduced["rollout/staleness"] = float(staleness)
        reduced["throughput/tokens_per_s"] = reduced.get("response_tokens", 0.0) / (time.time() - started)
        return reduced

    def _optimize(self, batch: TrainBatch) -> dict:
        steps = self.config.train.optimizer_steps_per_update
        if batch.size < steps:
            raise RuntimeError(f"this rank has {batch.size} responses for train.optimizer_steps_per_update={steps}")
        rows = -(-batch.size // steps)
        totals: dict[str, torch.Tensor] = {}
        grad_norm, skipped = 0.0, 0
        for step in range(steps):
            piece = batch.select(slice(step * rows, (step + 1) * rows))
            counts = all_reduce_sum(torch.tensor([piece.size, int(piece.loss_mask.sum())]), self.dims.dp_group)
            for chunk in self.optimization.model:
                chunk.train()
            self.optimization.zero_grad()
            objective = self.mode.objective(StepCounts(int(counts[0]), int(counts[1])))
            outputs = self.forward.run(piece, objective, forward_only=False)
            applied, norm = self.optimization.step()
            grad_norm, skipped = float(norm or 0.0), skipped + (not applied)
            for key, value in sum_metrics(outputs, objective.sizes, self.dims.pg.pp).items():
                totals[key] = totals[key] + value if key in totals else value
        metrics = objective.metrics(totals, steps)
        if not self.mode.uses_rollout:  # no rollout log-probs to compare with
            metrics.pop("train_rollout_logprob_abs_diff", None)
        return {**metrics, "grad_norm": grad_norm, "skipped_steps": float(skipped),
                "lr": self.optimization.learning_rate()}

    def _sync_weights(self, batch: TrainBatch | None, *, version: int) -> None:
        """Send the weights after `version` updates to the rollout engine and verify them with a probe sequence.
        An in-process engine is each leader's own; server engines are shared by all data-parallel replicas, so
        only the model-parallel group of `rollout.sender_dp_rank` updates them, once every replica's batch is
        complete, and every other leader then adopts what its engine left the servers serving."""
        self.rollout_ahead.weights_updated(version)  # refused while this rank's batch is being collected
        shared = self.rollout_backend.shared_across_ranks
        if shared:
            dist.barrier()
        failure = None
        if self._sends_weights:
            try:
                self._send_weights(batch)
            except Exception as error:  # noqa: BLE001 - every rank learns of it below, then it is raised
                failure = error
        if shared:
            self._share_sync_state(failure)
        if failure is not None:
            raise failure

    def _share_sync_state(self, failure: Exception | None) -> None:
        """The sending leader's engine state (or its failure) to every rank; the other leaders adopt the state."""
        sender = self.is_leader and self._sends_weights
        mine = (None if failure is None else f"rank {self.rank}: {failure}",
                self.rollout_engine.sync_state() if sender and failure is None else None)
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine, group=self.collection_group)
        errors = [error for error, _ in gathered if error is not None]
        if errors and failure is None:
            raise RuntimeError(f"the weight sync failed on the sending rank: {errors[0]}")
        states = [state for _, state in gathered if state is not None]
        if states and self.rollout_engine is not None and not sender:
            self.rollout_engine.adopt_sync_state(states[0])

    def _send_weights(self, batch: TrainBatch | None) -> None:
        probe_batch = batch.select(slice(0, 1)) if batch is not None and batch.size else self._probe_batch()
        expected = self._logp(probe_batch, dataclasses.replace(self.head, temperature=1.0))  # servers score at T 1
        tensors = self.student.hf_tensors(causal_lm_names=self.rollout_backend.causal_lm_weight_names)
        try:
            if self.is_leader:
                length = int(probe_batch.response_mask[0].sum())
                prompt_len = int(probe_batch.prompt_lens[0])
                token_ids = tuple(probe_batch.tokens[0, : prompt_len + length].tolist())
                probe = WeightProbe(token_ids, prompt_len, expected[0, :length],
                                    tolerance=self.config.rollout.weight_probe_tolerance)
                self.rollout_engine.update_weights(tensors, probe)
        finally:
            for _ in tensors:  # the gather is collective: every model-parallel rank finishes it, even after a failure
                pass

    def _probe_batch(self) -> TrainBatch:
        prompt = list(self.prompts[0].prompt_ids)
        response = prompt[-4:]
        zeros = torch.zeros(len(response))
        return TrainBatch.from_rows([prompt], [response], [zeros], [zeros], [0])

    # ------------------------------------------------------------------------------------------- outputs
    def _save(self, update: int, metrics: dict[str, float]) -> dict[str, float]:
        """Save the checkpoint after `update` updates, with the metrics of that update (`_resume` logs them if the
        run ended before it did); its time as metrics."""
        state = {"update": update, "sampler": self.sampler.state_dict(), "mode": self.mode.state_dict(),
                 "optimization": self.optimization.state_dict()}
        tick = time.time()
        local_state = {"rollout_ahead": self.rollout_ahead.state_dict(), "metrics": dict(metrics)}
        with timed(logger, f"checkpoint after update {update}"):
            checkpoint.save(self.run_dir, update, self.student, self.optimization, state,
                            self.config.checkpoint.keep_last, local_state=local_state, manifest=self.manifest)
        return reduce_metrics(phase_metrics({"checkpoint": (tick, time.time())}), self.metric_table, dist.group.WORLD)

    def _finish(self, started: float) -> None:
        release = plots = None
        if self.config.checkpoint.export_hf:
            from dnmopd.hf.release import write_release

            updates = self.config.train.updates
            release = self.run_dir / "release"
            with timed(logger, f"release {release}"), disk_errors(release, "the release"):
                write_release(self.student, release, training_config=dump_yaml(self.config),
                              metrics=self.last_metrics, card=self.config.checkpoint.release,
                              source=f"the trained model in memory at the end of the run (update {updates} of "
                                     f"{updates})", log=logger.info if self.rank == 0 else lambda message: None)
        if self.rank == 0 and self.config.logging.report:
            from dnmopd.trainer.measurements.report import draw_report

            plots = draw_report(self.run_dir)
        if self.rank == 0:
            checkpoints = [path for _, path in checkpoint.complete_checkpoints(self.run_dir)]
            print(run_summary(self.run_dir, self.config.train.updates - self.start_update, time.time() - started,
                              self.last_metrics, checkpoints=checkpoints, release=release, plots=plots), flush=True)

    def close(self) -> None:
        """Release what was built (also after a failed start-up, when only part of it exists)."""
        for part in ("rollout_ahead", "mode", "measurements", "verification", "rollout_engine"):
            if getattr(self, part, None) is not None:
                getattr(self, part).close()
        for teacher in getattr(self, "teachers", {}).values():
            teacher.close()
        if getattr(self, "dims", None) is not None:
            self.dims.destroy()
        if dist.is_initialized():
            dist.destroy_process_group()
        if getattr(self, "lock", None) is not None:
            self.lock.release()
