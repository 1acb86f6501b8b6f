"""What the SGLang and vLLM teachers share: the config, the replica pool, id validation, checks of each
answer, startup checks, batching with per-sample isolation."""

from __future__ import annotations

import asyncio
import json
import logging
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dnmopd.hf.models import resolve_vocab_size
from dnmopd.serving.blocking import run_blocking
from dnmopd.serving.errors import RequestRejected, ServingError, TransientServerError
from dnmopd.serving.pool import ReplicaPool
from dnmopd.serving.token_ids import validate_token_ids
from dnmopd.teachers.base import ScoreRequest, TeacherError, TeacherScorer, TeacherScores

logger = logging.getLogger(__name__)


class HttpTeacher(TeacherScorer):
    """A teacher behind a pool of identical servers. Subclasses supply the wire format and extend `Config`."""

    score_path: str
    health_path: str
    info_path: str

    @dataclass(kw_only=True, slots=True)
    class Config:
        name: str
        """Teacher name (the key the domain routing uses)."""
        model_path: str
        """The HF folder the servers were started with; the startup check compares it with what they serve."""
        pool: ReplicaPool.Config
        """Replicas, balancing, connection limits, time-outs and retries."""
        vocab_size: int = 0
        """Ids must be below this; 0 reads it from `model_path`/config.json."""
        top_k: int = 0
        """Also return the top-k log-probs at every response position (0: off; a request may ask for more)."""
        batch_request_size: int = 32
        """Samples per POST in `score_many` / `score_batch` (the async `score` sends one sample per POST); a
        POST the server rejects is sent again sample by sample, so only the bad sample fails."""
        health_timeout_s: float = 30.0
        """Time-out of each startup check request."""

        def __post_init__(self):
            owner = type(self).__qualname__
            for name in ("top_k", "vocab_size"):
                if getattr(self, name) < 0:
                    raise ValueError(f"{owner}.{name}={getattr(self, name)}: must be >= 0")
            if self.batch_request_size < 1:
                raise ValueError(f"{owner}.batch_request_size={self.batch_request_size}: must be >= 1")

    def __init__(self, config: HttpTeacher.Config):
        self.config = config
        self.name = config.name
        self.vocab_size = resolve_vocab_size(config)
        self.pool = config.pool.build(name=f"teacher {config.name}", health_path=self.health_path)

    def top_k(self, request: ScoreRequest) -> int:
        """Top-k log-probs returned for `request`: what it asks for, or the config's `top_k` when larger."""
        return max(self.config.top_k, request.top_k)

    @abstractmethod
    def _body(self, requests: Sequence[ScoreRequest]) -> dict[str, Any]:
        """Request body scoring `requests` (one or several samples) in one POST."""

    @abstractmethod
    def _answers(self, payload: Any, count: int) -> list[Any]:
        """The per-sample parts of the JSON answer to a POST of `count` samples, in request order."""

    @abstractmethod
    def _parse_scores(
        self, answer: Any, request: ScoreRequest
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(logprobs, topk_ids, topk_logprobs) from one sample's answer; raises ResponseFormatError on a bad one."""

    @abstractmethod
    def _check_identity(self, url: str, info: Any) -> None:
        """Raise TeacherError unless `info` (the model-info answer) shows the expected model."""

    async def score(self, request: ScoreRequest) -> TeacherScores:
        return (await self._score_chunk([request]))[0]

    async def _score_chunk(self, requests: Sequence[ScoreRequest]) -> list[TeacherScores]:
        for request in requests:
            validate_token_ids(request.token_ids, self.vocab_size, what=f"teacher {self.name} sample")
        return await self.pool.post(self.score_path, self._body(requests), parse=lambda p: self._parse(p, requests))

    async def score_many(self, requests: Sequence[ScoreRequest]) -> list[TeacherScores | Exception]:
        """Chunks of `batch_request_size` samples per POST, all in flight together. A chunk the server rejects
        (HTTP 4xx, e.g. one sample longer than its context) is sent again one sample per POST, so that only
        the bad sample fails (its entry is the error)."""
        size = self.config.batch_request_size
        chunks = [requests[i : i + size] for i in range(0, len(requests), size)]
        results = await asyncio.gather(*(self._score_isolated(chunk) for chunk in chunks))
        return [outcome for chunk in results for outcome in chunk]

    async def _score_isolated(self, requests: Sequence[ScoreRequest]) -> list[TeacherScores | Exception]:
        try:
            return await self._score_chunk(requests)
        except RequestRejected as error:
            if len(requests) == 1:
                return [error]
            logger.warning("teacher %s: a POST of %d samples was rejected (%s); sending them one by one",
                           self.name, len(requests), error)
            self.pool.counters["isolated_chunks"] += 1
            singles = await asyncio.gather(*(self._score_isolated([r]) for r in requests))
            return [outcome for single in singles for outcome in single]
        except (ServingError, TeacherError) as error:
            return [error] * len(requests)

    def score_batch(self, requests: Sequence[ScoreRequest]) -> list[TeacherScores]:
        """Blocking `score_many`; the first failed sample's error is raised."""
        outcomes = run_blocking(self.score_many(requests))
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                raise outcome
        return outcomes

    def _parse(self, payload: Any, requests: Sequence[ScoreRequest]) -> list[TeacherScores]:
        """Checked scores for `requests` from the JSON answer; a bad answer raises a retried error."""
        results = []
        for answer, request in zip(self._answers(payload, len(requests)), requests, strict=True):
            logprobs, topk_ids, topk_logprobs = self._parse_scores(answer, request)
            scores = TeacherScores(logprobs=logprobs, topk_ids=topk_ids, topk_logprobs=topk_logprobs)
            try:
                results.append(scores.check(request, source=f"teacher {self.name}"))
            except TeacherError as error:  # a wrong answer from one replica is retried on another
                raise TransientServerError(str(error)) from error
        return results

    def check(self) -> None:
        """Every replica: health endpoint answers 200 and the model info shows `model_path`."""
        run_blocking(self.pool.each_replica(self._check_replica))

    async def _check_replica(self, replica) -> None:
        timeout = self.config.health_timeout_s
        try:
            status = await self.pool.health_status(replica, timeout_s=timeout)
            if status != 200:
                raise TeacherError(f"teacher {self.name}: {replica.url}{self.health_path} answered {status}")
            status, text = await self.pool.request_to(replica, "GET", self.info_path, timeout_s=timeout)
        except ServingError as error:
            raise TeacherError(f"teacher {self.name}: {replica.url} is not reachable: {error}") from error
        if status != 200:
            raise TeacherError(f"teacher {self.name}: {replica.url}{self.info_path} answered {status}")
        self._check_identity(replica.url, json.loads(text))

    async def aclose(self) -> None:
        await self.pool.aclose()
