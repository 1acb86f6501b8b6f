"""Rollout and teacher scoring: prompts -> sampled responses -> every needed teacher's log-probs (+ verdicts).

Each response's scoring requests (and its verification) start the moment its rollout finishes, so teacher
prefill overlaps the generation of the rest of the batch. A teacher failure is handled by the fleet's
policy: `mask` leaves the teacher's row None (the response then trains with advantage 0), `stop` raises.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from dnmopd.rollout.base import Rollout, RolloutEngine, RolloutRequest, SamplingParams
from dnmopd.teachers.base import ScoreRequest
from dnmopd.teachers.fleet import TeacherFleet
from dnmopd.trainer.prompts import Prompt

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
    rollout_seconds: float
    """Wall time from the first rollout request to the last score/verdict."""
    teacher_failures: dict[str, int]
    teacher_seconds: dict[str, list[float]]
    """Per teacher, the latency of each scoring request (retries included)."""


def rollout_counts(samples: list[Sample], seconds: float) -> list[float]:
    """(responses, response tokens, truncated responses, rollout seconds): what `Trainer.rollout_metrics` reads
    once summed over data-parallel ranks."""
    return [len(samples), sum(len(s.response_ids) for s in samples),
            sum(s.finish_reason == "length" for s in samples), seconds]


class ExperienceCollector:
    """Turns this rank's prompts of one update into scored samples."""

    def __init__(self, engine: RolloutEngine, fleet: TeacherFleet | None, *, sampling: SamplingParams,
                 samples_per_prompt: int, teachers_for: Callable[[str], Sequence[str]] = lambda domain: (),
                 verifier: Verifier | None = None, decode: Callable[[list[int]], str] | None = None,
                 return_hidden_states: bool = False):
        if verifier is not None and decode is None:
            raise ValueError("verifying responses needs a decode function")
        self.engine, self.fleet = engine, fleet
        self.sampling = sampling
        self.samples_per_prompt = samples_per_prompt
        self.teachers_for = teachers_for
        self.verifier, self.decode = verifier, decode
        self.return_hidden_states = return_hidden_states

    def collect(self, prompts: Sequence[Prompt], *, seed_offset: int) -> Experience:
        """Sample `samples_per_prompt` responses per prompt (sample seeds start at sampling.seed + seed_offset),
        score them with the teachers each needs, and verify them when a verifier is set."""
        params = self.sampling
        if params.seed is not None:
            params = dataclasses.replace(params, seed=params.seed + seed_offset)
        n = self.samples_per_prompt
        requests = [RolloutRequest(p.prompt_ids, sample_id=i * n + k) for i, p in enumerate(prompts) for k in range(n)]
        failures_before = dict(self.fleet.failures) if self.fleet else {}
        self._latency: dict[str, list[float]] = {}
        start = time.perf_counter()
        samples = asyncio.run(self._collect(prompts, requests, params))
        failures = {name: count - failures_before.get(name, 0)
                    for name, count in (self.fleet.failures.items() if self.fleet else [])}
        return Experience(samples, time.perf_counter() - start, failures, self._latency)

    async def _collect(self, prompts, requests, params) -> list[Sample]:
        samples: dict[int, Sample] = {}
        tasks: list[asyncio.Task] = []
        try:
            async for rollout in self.engine.stream(requests, params):
                sample = self._sample(prompts, rollout)
                samples[rollout.sample_id] = sample
                request = ScoreRequest(sample.token_ids, len(sample.prompt.prompt_ids))
                for name in self.teachers_for(sample.domain):
                    tasks.append(asyncio.create_task(self._score(sample, rollout.sample_id, name, request)))
                if self.verifier is not None:
                    tasks.append(asyncio.create_task(self._verify(sample)))
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            await self.engine.aclose()
            if self.fleet is not None:
                await self.fleet.aclose()
        return [samples[i] for i in sorted(samples)]

    def _sample(self, prompts, rollout: Rollout) -> Sample:
        group = rollout.sample_id // self.samples_per_prompt
        return Sample(prompts[group], group, list(rollout.response_ids), rollout.logprobs.float(),
                      rollout.finish_reason)

    async def _score(self, sample: Sample, index: int, name: str, request: ScoreRequest) -> None:
        start = time.perf_counter()
        scored = await self.fleet.score_one(index, name, request)
        self._latency.setdefault(name, []).append(time.perf_counter() - start)
        sample.scores[name] = scored.scores.logprobs if scored.ok else None
        if self.return_hidden_states and scored.ok:
            sample.hidden_states[name] = scored.scores.hidden_states

    async def _verify(self, sample: Sample) -> None:
        text = self.decode(sample.response_ids)
        sample.verdict = await asyncio.to_thread(self.verifier, sample.domain, text, sample.prompt.label)
