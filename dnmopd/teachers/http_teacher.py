"""What the SGLang and vLLM teachers share: the replica pool, id validation, startup checks, batching."""

from __future__ import annotations

import asyncio
import json
import os
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from dnmopd.serving.errors import ServingError, TransientServerError
from dnmopd.serving.token_ids import validate_token_ids
from dnmopd.teachers.base import ScoreRequest, TeacherError, TeacherScorer, TeacherScores
from dnmopd.teachers.hf_model import config_vocab_size


def resolve_vocab_size(config: Any, owner: str) -> int:
    """`config.vocab_size`, or the one in `config.model_path`/config.json; errors name the fix."""
    if config.vocab_size:
        return int(config.vocab_size)
    size = config_vocab_size(config.model_path)
    if size is None:
        raise ValueError(
            f"{owner}.Config.vocab_size: {config.model_path}/config.json is not readable here; "
            "set vocab_size explicitly (ids are validated against it before they are sent)"
        )
    return size


def same_model_path(served: Any, expected: str) -> bool:
    if not isinstance(served, str):
        return False
    return served == expected or os.path.realpath(served) == os.path.realpath(expected)


class HttpTeacher(TeacherScorer):
    """A teacher behind a pool of identical servers. Subclasses supply the wire format."""

    score_path: str
    health_path: str
    info_path: str

    def __init__(self, config: Any, *, owner: str):
        self.config = config
        self.name = config.name
        self.vocab_size = resolve_vocab_size(config, owner)
        self.pool = config.pool.build(name=f"teacher {config.name}")

    @abstractmethod
    def _body(self, requests: Sequence[ScoreRequest]) -> dict[str, Any]:
        """Request body scoring `requests` (one or several samples) in one POST."""

    @abstractmethod
    def _parse(self, payload: Any, requests: Sequence[ScoreRequest]) -> list[TeacherScores]:
        """Scores for `requests` from the JSON answer; raises ResponseFormatError on a bad body."""

    @abstractmethod
    def _check_identity(self, url: str, info: Any) -> None:
        """Raise TeacherError unless `info` (the model-info answer) shows the expected model."""

    async def score(self, request: ScoreRequest) -> TeacherScores:
        return (await self._score_chunk([request]))[0]

    async def _score_chunk(self, requests: Sequence[ScoreRequest]) -> list[TeacherScores]:
        for request in requests:
            validate_token_ids(request.token_ids, self.vocab_size, what=f"teacher {self.name} sample")
        return await self.pool.post(self.score_path, self._body(requests), parse=lambda p: self._parse(p, requests))

    def score_batch(self, requests: Sequence[ScoreRequest]) -> list[TeacherScores]:
        """Blocking: chunks of `batch_request_size` samples per POST, all chunks in flight together."""
        size = self.config.batch_request_size
        chunks = [requests[i : i + size] for i in range(0, len(requests), size)]

        async def run() -> list[TeacherScores]:
            try:
                results = await asyncio.gather(*(self._score_chunk(chunk) for chunk in chunks))
            finally:
                await self.aclose()
            return [scores for chunk in results for scores in chunk]

        return asyncio.run(run())

    def _checked(self, scores: TeacherScores, request: ScoreRequest) -> TeacherScores:
        try:
            return scores.check(request, source=f"teacher {self.name}")
        except TeacherError as error:  # a wrong answer from one replica is retried on another
            raise TransientServerError(str(error)) from error

    def check(self) -> None:
        """Every replica: health endpoint answers 200 and the model info shows `model_path`."""

        async def run() -> None:
            try:
                for replica in self.pool.replicas:
                    await self._check_replica(replica)
            finally:
                await self.aclose()

        asyncio.run(run())

    async def _check_replica(self, replica) -> None:
        timeout = self.config.health_timeout_s
        try:
            status, _ = await self.pool.request_to(replica, "GET", self.health_path, timeout_s=timeout)
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
