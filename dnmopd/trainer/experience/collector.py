"""Rollout and teacher scoring: prompts -> sampled responses -> every needed teacher's log-probs (+ verdicts).

Each response's scoring requests (and its verification) start the moment its rollout finishes, so teacher
prefill overlaps the generation of the rest of the batch. A teacher failure is handled by the fleet's
policy: `mask` leaves the teacher's row None (the response then trains with advantage 0), `stop` raises.
The collector's metrics (`EXPERIENCE_METRICS`) are per rank, reduced by name by the update loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from dnmopd.data.prompts import Prompt
from dnmopd.rollout.base import Rollout, RolloutEngine, RolloutRequest, SamplingParams
from dnmopd.serving.blocking import run_blocking
from dnmopd.teachers.base import ScoreRequest
from dnmopd.teachers.fleet import TeacherFleet
from dnmopd.trainer.measurements.metric_table import Mean, MetricTable

EXPERIENCE_METRICS = MetricTable(
    ("response_tokens", "sum", "Response tokens of the update's batch (all data-parallel ranks)."),
    ("response_length/mean", "mean", "Mean response length in tokens."),
    ("truncation_rate", "mean", "Share of responses cut at rollout.sampling.max_new_tokens."),
    ("accuracy/{domain}", "mean", "Share of the domain's responses its verifier judged correct (a response "
                                  "without a verdict counts as wrong); only when responses are verified."),
    ("no_verdict/{domain}", "sum", "Responses of the domain the verifier could not judge (time-out, crash, "
                                   "exception): scored as wrong, logged by dnmopd.trainer.experience.verification."),
    ("teacher/{teacher}/failures", "sum", "Scoring requests of the teacher that failed after all retries "
                                          "(the sample is masked or the run stops: teachers.fleet)."),
    ("teacher/{teacher}/latency_s", "mean", "Mean seconds per scoring request of the teacher, retries included."),
)

Verifier = Callable[[str, str, str], "bool | None"]


@dataclass(slots=True)
class Sample:
    prompt: Prompt
    group: int
    """Position of the sample's prompt in this rank's batch (the GRPO group)."""
    response_ids: list[int]
    rollout_logp: torch.Tensor
    """float32 [R]: log-prob of each response token under the distribution it was sampled from."""
    finish_reason: str
    scores: dict[str, torch.Tensor | None] = field(default_factory=dict)
    """Teacher name -> float32 [R] sampled-token log-probs, None if that teacher failed (masked)."""
    hidden_states: dict[str, torch.Tensor] = field(default_factory=dict)
    """Teacher name -> [R, hidden] final hidden states (in-process teachers, full-vocab loss only)."""
    topk: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    """Teacher name -> (ids int64 [R, k], log-probs float32 [R, k]) of its k most likely tokens at each response
    position (top-k loss only)."""
    verdict: bool | None = None
    """Verifier's correctness verdict (None: not verified, or the verifier failed)."""

    @property
    def token_ids(self) -> list[int]:
        return list(self.prompt.prompt_ids) + self.response_ids

    @property
    def domain(self) -> str:
        return self.prompt.domain


@dataclass(slots=True)
class Experience:
    samples: list[Sample]
    phases: dict[str, tuple[float, float]]
    """Wall-clock (start, end) of `rollout` (first request to last response) and `scoring` (first scoring or
    verification request to the last answer), as time.time() seconds."""
    teacher_failures: dict[str, int]
    teacher_seconds: dict[str, list[float]]
    """Per teacher, the latency of each scoring request (retries included)."""
    verified: bool
    """Whether every sample was given to the verifier."""

    def metrics(self) -> dict:
        """This rank's EXPERIENCE_METRICS of the batch."""
        metrics = sample_metrics(self.samples, verified=self.verified)
        for name, count in self.teacher_failures.items():
            metrics[f"teacher/{name}/failures"] = float(count)
        for name, seconds in self.teacher_seconds.items():
            metrics[f"teacher/{name}/latency_s"] = Mean(sum(seconds), len(seconds))
        return metrics


def sample_metrics(samples: Sequence[Sample], *, verified: bool) -> dict:
    """Lengths, truncation and (when `verified`) per-domain accuracy of this rank's samples."""
    responses = len(samples)
    tokens = sum(len(s.response_ids) for s in samples)
    metrics = {"response_tokens": float(tokens), "response_length/mean": Mean(tokens, responses),
               "truncation_rate": Mean(sum(s.finish_reason == "length" for s in samples), responses)}
    if verified:
        for domain in dict.fromkeys(s.domain for s in samples):
            mine = [s for s in samples if s.domain == domain]
            metrics[f"accuracy/{domain}"] = Mean(sum(s.verdict is True for s in mine), len(mine))
            metrics[f"no_verdict/{domain}"] = float(sum(s.verdict is None for s in mine))
    return metrics


def merge_phases(*phases: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """One (earliest start, latest end) per phase over several collections (GRPO's generation batches)."""
    merged: dict[str, tuple[float, float]] = {}
    for spans in phases:
        for name, (start, end) in spans.items():
            old = merged.get(name, (start, end))
            merged[name] = (min(old[0], start), max(old[1], end))
    return merged


class ExperienceCollector:
    """Turns this rank's prompts of one update into scored samples."""

    def __init__(self, engine: RolloutEngine, fleet: TeacherFleet | None, *, sampling: SamplingParams,
                 samples_per_prompt: int, teachers_for: Callable[[str], Sequence[str]] = lambda domain: (),
                 verifier: Verifier | None = None, decode: Callable[[list[int]], str] | None = None,
                 return_hidden_states: bool = False, teacher_topk: int = 0):
        if verifier is not None and decode is None:
            raise ValueError("verifying responses needs a decode function")
        self.engine, self.fleet = engine, fleet
        self.sampling = sampling
        self.samples_per_prompt = samples_per_prompt
        self.teachers_for = teachers_for
        self.verifier, self.decode = verifier, decode
        self.return_hidden_states = return_hidden_states
        self.teacher_topk = teacher_topk

    def collect(self, prompts: Sequence[Prompt], *, seed_offset: int) -> Experience:
        """Sample `samples_per_prompt` responses per prompt (sample seeds start at sampling.seed + seed_offset),
        score them with the teachers each needs, and verify them when a verifier is set."""
        params = self.sampling
        if params.seed is not None:
            params = dataclasses.replace(params, seed=params.seed + seed_offset)
        n = self.samples_per_prompt
        requests = [RolloutRequest(p.prompt_ids, sample_id=i * n + k) for i, p in enumerate(prompts) for k in range(n)]
        failures_before = dict(self.fleet.failures) if self.fleet else {}
        run = _Run()
        samples = run_blocking(self._collect(prompts, requests, params, run))
        failures = {name: self.fleet.failures[name] - failures_before.get(name, 0)
                    for name in (self.fleet.teachers if self.fleet else ())}
        return Experience(samples, run.phases(), failures, run.latency, verified=self.verifier is not None)

    async def _collect(self, prompts, requests, params, run: _Run) -> list[Sample]:
        samples: dict[int, Sample] = {}
        tasks: list[asyncio.Task] = []
        run.mark("rollout")
        try:
            async for rollout in self.engine.stream(requests, params):
                run.mark("rollout")
                sample = self._sample(prompts, rollout)
                samples[rollout.sample_id] = sample
                request = ScoreRequest(sample.token_ids, len(sample.prompt.prompt_ids), top_k=self.teacher_topk)
                for name in self.teachers_for(sample.domain):
                    tasks.append(asyncio.create_task(self._score(sample, rollout.sample_id, name, request, run)))
                if self.verifier is not None:
                    tasks.append(asyncio.create_task(self._verify(sample, run)))
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return [samples[i] for i in sorted(samples)]

    def _sample(self, prompts, rollout: Rollout) -> Sample:
        group = rollout.sample_id // self.samples_per_prompt
        return Sample(prompts[group], group, list(rollout.response_ids), rollout.logprobs.float(),
                      rollout.finish_reason)

    async def _score(self, sample: Sample, index: int, name: str, request: ScoreRequest, run: _Run) -> None:
        run.mark("scoring")
        start = time.perf_counter()
        scored = await self.fleet.score_one(index, name, request)
        run.latency.setdefault(name, []).append(time.perf_counter() - start)
        run.mark("scoring")
        sample.scores[name] = scored.scores.logprobs if scored.ok else None
        if self.return_hidden_states and scored.ok:
            sample.hidden_states[name] = scored.scores.hidden_states
        if self.teacher_topk and scored.ok:
            k = self.teacher_topk
            sample.topk[name] = (scored.scores.topk_ids[:, :k], scored.scores.topk_logprobs[:, :k])

    async def _verify(self, sample: Sample, run: _Run) -> None:
        run.mark("scoring")
        text = self.decode(sample.response_ids)
        sample.verdict = await asyncio.to_thread(self.verifier, sample.domain, text, sample.prompt.label)
        run.mark("scoring")


@dataclass
class _Run:
    """Per-collection bookkeeping: the wall-clock span of each phase, per-teacher request latencies."""

    spans: dict[str, tuple[float, float]] = field(default_factory=dict)
    latency: dict[str, list[float]] = field(default_factory=dict)

    def mark(self, phase: str) -> None:
        """Widen the phase's span to include now."""
        now = time.time()
        start, end = self.spans.get(phase, (now, now))
        self.spans[phase] = (min(start, now), max(end, now))

    def phases(self) -> dict[str, tuple[float, float]]:
        return dict(self.spans)
