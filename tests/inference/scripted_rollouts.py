"""A rollout engine that finishes given responses one after the other, for tests of what happens to each
response once it is finished (teacher scoring, failures, restarts) without generating anything."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import torch

from dnmopd.rollout.base import Rollout, RolloutEngine, RolloutRequest, SamplingParams


class ScriptedRollouts(RolloutEngine):
    """Rollout `i` answers its prompt with `responses[i]` (log-probs 0), `interval_s` after rollout i - 1;
    `before(i)`, when given, is awaited before rollout i starts."""

    def __init__(self, responses: Sequence[Sequence[int]], *, interval_s: float, vocab_size: int = 1024,
                 before: Callable[[int], Awaitable[None]] | None = None):
        self.responses = [list(r) for r in responses]
        self.interval_s = interval_s
        self.vocab_size = vocab_size
        self.before = before

    async def generate(self, request: RolloutRequest, params: SamplingParams) -> Rollout:
        response = self.responses[request.sample_id]
        return Rollout(request.sample_id, list(request.prompt_ids), response, torch.zeros(len(response)), "stop")

    async def stream(self, requests: Sequence[RolloutRequest], params: SamplingParams) -> AsyncIterator[Rollout]:
        for request in requests:
            if self.before is not None:
                await self.before(request.sample_id)
            await asyncio.sleep(self.interval_s)
            yield await self.generate(request, params)

    def update_weights(self, named_tensors, probe) -> None:
        raise NotImplementedError("scripted rollouts have no weights")
