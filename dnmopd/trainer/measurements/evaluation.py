"""Evaluation during training (`eval:`): every `eval.every` updates (and after the last), the run's own rollout
engine answers the evaluation suites of `dnmopd.eval` and/or a held-out prompt file, and the scores join the
update's metrics as `eval/<suite>` (metrics.jsonl, TensorBoard, W&B, the report's eval.png).

When: `Measurements.after_sync` (`measurements.py`) calls `after_update(update)` after the update's weight
sync. With `train.rollout_ahead: 1` the batch collected ahead has been drained before that sync and the next
one is only started by the next `_update`, so nothing else uses the engine during the evaluation and it
serves exactly the weights after `update + 1` updates (those of checkpoint `iter_<update + 1>`).

Where: global rank 0 (a model-parallel leader, so it holds a rollout engine) evaluates; the other ranks wait
in a broadcast of its results over a gloo group of its own with a long time-out (`eval.timeout_s`), so a long
evaluation trips neither NCCL's watchdog nor the collection group's. An error on rank 0 is broadcast too and
raised on every rank: no rank is left waiting.

Failures: catalogs, graders (IF registry coverage, LiveCodeBench test files, sandbox isolation), the held-out
file and the verifiers are checked at start-up, and a problem stops the run there, naming the option. During
the run a suite whose grading fails (model output is hostile input; the protocol's graders stop rather than
score a checker failure) is left out of the metrics, counted in `eval_failures` and its error is
written to `eval/<update + 1>/<suite>/error.txt`; the run goes on. A generation failure (the engine itself)
stops the run, as it would in training.

Records: `<run_dir>/eval/<update + 1>/<suite>/cap<max_tokens>/` holds the files of `launch/evaluate.py`
(MANIFEST.json, raw/, grades/, records.jsonl, summary.json), `<run_dir>/eval/<update + 1>/heldout/records.jsonl`
the held-out answers and verdicts.
"""

from __future__ import annotations

import datetime
import logging
import shutil
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import torch.distributed as dist

from dnmopd.config import FieldValueError
from dnmopd.eval.config import CodeGradingConfig
from dnmopd.eval.protocol import SEED, SUITES, TEMPERATURE, TOP_K, TOP_P
from dnmopd.io import atomic_write, write_jsonl
from dnmopd.rollout.base import RolloutRequest, SamplingParams
from dnmopd.trainer.measurements.metric_table import MetricTable

logger = logging.getLogger(__name__)

HELDOUT = "heldout"
EVAL_METRICS = MetricTable(
    ("eval/{suite}", "global", "avg@n score (percent) of an evaluation suite, answered by the weights after the "
                               "update (eval.every; the protocol's sampling, eval.n, eval.max_tokens)."),
    ("eval/heldout", "global", "Percent of the held-out prompts' answers (eval.prompts) the run's verifiers "
                               "judge correct (no verdict counts as wrong)."),
    ("eval/heldout/{domain}", "global", "eval/heldout over one domain's prompts."),
    ("eval_failures", "global", "Suites of the evaluation whose grading failed (left out of eval/*; "
                                        "the cause in eval/<update + 1>/<suite>/error.txt)."),
    ("time/eval", "global", "Seconds of the evaluation after the update (generation and grading)."),
)


def _code_options(code: CodeGradingConfig) -> dict:
    return {"timeout_s": code.timeout_s, "memory_bytes": code.memory_bytes, "workers": code.workers,
            "min_isolation": code.min_isolation}


class TrainingEvaluation:
    @dataclass(kw_only=True, slots=True)
    class Config:
        every: int = 0
        """Evaluate every this many updates and after the last one (0: never)."""
        suites: list[str] = field(default_factory=list)
        """Evaluation suites of docs/evaluation.md (aime25, aime26, lcb_v5, lcb_v6, ifeval, ifbench, math500),
        prepared in data_dir by `launch/evaluate.py prepare`; logged as eval/<suite>."""
        prompts: Path | None = None
        """A held-out prompt file in the training data's schema (`samples:<file>` = the embedded sample data),
        domains among data.domains, judged by the `verifiers` section; logged as eval/heldout[/<domain>]."""
        n: int | None = None
        """Answers per question (None: each suite's protocol n, 1 per held-out prompt)."""
        max_tokens: int = 8192
        """Generation cap of every answer (the protocol's caps are 8192 and 16384)."""
        limit: int | None = None
        """Only the first `limit` questions of each suite and of the held-out file (None: all)."""
        data_dir: Path = Path("eval_data")
        """Prepared catalogs, LiveCodeBench tests and NLTK data (`launch/evaluate.py prepare`)."""
        code: CodeGradingConfig = field(default_factory=CodeGradingConfig)
        """LiveCodeBench sandbox limits (as in `launch/evaluate.py`)."""
        timeout_s: float = 6 * 3600.0
        """Longest one evaluation may take before the ranks waiting for rank 0 give up."""

        def __post_init__(self):
            if self.every < 0:
                raise FieldValueError("every", f"must be >= 0, got {self.every}")
            for name in ("n", "limit"):
                value = getattr(self, name)
                if value is not None and value < 1:
                    raise FieldValueError(name, f"must be >= 1 or null, got {value}")
            if self.max_tokens < 1:
                raise FieldValueError("max_tokens", f"must be >= 1, got {self.max_tokens}")
            if not self.timeout_s > 0:
                raise FieldValueError("timeout_s", f"must be > 0, got {self.timeout_s}")
            unknown = [s for s in self.suites if s not in SUITES]
            if unknown or len(set(self.suites)) != len(self.suites):
                raise FieldValueError("suites", f"must be distinct names among {', '.join(SUITES)}, got "
                                                f"{self.suites}")
            if self.every and not self.suites and self.prompts is None:
                raise FieldValueError("every", f"is {self.every} but there is nothing to evaluate: set eval.suites "
                                               "and/or eval.prompts")

    def __init__(self, config, *, run_dir: Path, tokenizer, engine, rank: int, model_vocab: int):
        """`config` is the run's TrainerConfig; `engine` is rank 0's rollout engine (None elsewhere)."""
        self.config = config.eval
        self.run_dir, self.tokenizer, self.engine, self.rank = run_dir, tokenizer, engine, rank
        self.updates = config.train.updates
        self.model = config.student.hf_path
        self.prompts = self.verification = None
        if not self.config.every:
            return
        # every rank builds the group (a collective), in the same place of the build order
        self.group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=self.config.timeout_s))
        self._on_rank_0(lambda: self._check(config, model_vocab))

    # ------------------------------------------------------------------------------------------- start-up
    def _check(self, config, model_vocab: int) -> None:
        """Everything an evaluation needs, checked before the first update (rank 0)."""
        for suite in self.config.suites:
            try:
                self._plan(suite, done=0)
            except Exception as error:  # noqa: BLE001 - reported with the option that names the suite
                raise FieldValueError("eval.suites", f"{suite}: {error}") from error
        if self.config.prompts is not None:
            from dnmopd.data.prompts import load_run_prompts
            from dnmopd.trainer.experience.verification import Verification

            try:
                self.prompts = load_run_prompts(self.config.prompts, self.tokenizer, config.data,
                                                model_vocab=model_vocab)
            except Exception as error:  # noqa: BLE001 - reported with the option
                raise FieldValueError("eval.prompts", str(error)) from error
            if self.config.limit:
                self.prompts.prompts = self.prompts.prompts[: self.config.limit]
            self.verification = Verification(config.verifiers, {p.domain for p in self.prompts.prompts})

    def _plan(self, suite: str, *, done: int):
        from dnmopd.eval.runner import plan_suite

        return plan_suite(suite, name=str(done), model=self.model, engine_name="trainer",
                          data_dir=self.config.data_dir, output_dir=self.run_dir / "eval", cap=self.config.max_tokens,
                          n=self.config.n, limit=self.config.limit, code_options=_code_options(self.config.code))

    # ------------------------------------------------------------------------------------------- the hook
    def due(self, update: int) -> bool:
        done = update + 1
        return bool(self.config.every) and (done % self.config.every == 0 or done == self.updates)

    def after_update(self, update: int) -> dict[str, float]:
        """The evaluation metrics of the weights after `update` (empty when none is due); every rank calls it
        and gets the same dict."""
        if not self.due(update):
            return {}
        return self._on_rank_0(lambda: self._evaluate(update + 1))

    def _on_rank_0(self, fn):
        """fn() on rank 0, its result (or its error) broadcast to every rank."""
        message = [None]
        if self.rank == 0:
            try:
                message = [("ok", fn())]
            except BaseException as error:
                message = [("error", f"{type(error).__name__}: {error}")]
                dist.broadcast_object_list(message, src=0, group=self.group)
                raise
        dist.broadcast_object_list(message, src=0, group=self.group)
        kind, value = message[0]
        if kind == "error":
            raise RuntimeError(f"evaluation during training failed on rank 0: {value}")
        return value

    # ------------------------------------------------------------------------------------------- rank 0
    def _evaluate(self, done: int) -> dict[str, float]:
        from dnmopd.eval.runner import generate_suite, grade_suite

        started = time.time()
        logger.info("evaluating the weights after update %d", done)
        folder = self.run_dir / "eval" / str(done)
        if folder.exists():  # left by a run that stopped after this update: those answers are not these weights'
            logger.info("removing %s, an earlier evaluation of update %d", folder, done)
            shutil.rmtree(folder)
        metrics, failures = {}, 0
        for suite in self.config.suites:
            plan = self._plan(suite, done=done)
            chunks = generate_suite(self.engine, self.tokenizer, plan)
            try:
                metrics[f"eval/{suite}"] = grade_suite(plan, chunks)["score"]
            except Exception as error:  # noqa: BLE001 - a grading failure never stops the run
                failures += 1
                logger.warning("eval %s after update %d: grading failed, left out (%s: %s)", suite, done,
                               type(error).__name__, error)
                with atomic_write(folder / suite / "error.txt") as handle:
                    handle.write("".join(traceback.format_exception(error)))
        if self.prompts is not None:
            metrics.update(self._heldout(folder / HELDOUT))
        metrics["eval_failures"] = float(failures)
        metrics["time/eval"] = time.time() - started
        logger.info("eval after update %d: %s", done, ", ".join(f"{k} {v:.2f}" for k, v in metrics.items()))
        return metrics

    def _heldout(self, folder: Path) -> dict[str, float]:
        """Answer the held-out prompts with the protocol's sampling and judge them with the run's verifiers."""
        n = self.config.n or 1
        params = SamplingParams(temperature=TEMPERATURE, top_p=TOP_P, top_k=TOP_K,
                                max_new_tokens=self.config.max_tokens, seed=SEED)
        prompts = self.prompts.prompts
        requests = [RolloutRequest(p.prompt_ids, sample_id=q * n + j) for q, p in enumerate(prompts) for j in range(n)]
        rollouts = {r.sample_id: r for r in self.engine.generate_batch(requests, params)}
        decode = self.tokenizer.tokenizer.decode  # as the training verdicts decode responses
        records, correct = [], defaultdict(list)
        for q, prompt in enumerate(prompts):
            answers = [rollouts[q * n + j] for j in range(n)]
            texts = [decode(a.response_ids) for a in answers]
            verdicts = [self.verification.verdict(prompt.domain, text, prompt.label) for text in texts]
            correct[prompt.domain] += [v is True for v in verdicts]
            records.append({"index": prompt.index, "domain": prompt.domain, "n": n, "responses": texts,
                            "verdicts": verdicts, "token_counts": [len(a.response_ids) for a in answers],
                            "finish_reasons": [a.finish_reason for a in answers]})
        write_jsonl(folder / "records.jsonl", records)
        every = [v for values in correct.values() for v in values]
        return {f"eval/{HELDOUT}": 100.0 * sum(every) / len(every),
                **{f"eval/{HELDOUT}/{d}": 100.0 * sum(v) / len(v) for d, v in sorted(correct.items())}}

    def close(self) -> None:
        if self.verification is not None:
            self.verification.close()
