"""What the SGLang and vLLM rollout engines share: the pool, generation requests, weight updates from disk.

A weight update writes the HF-named tensors as a model folder under `update_dir`, asks every replica to
load it, and then probes every replica: the served log-probs of the probe sequence must equal the
expected log-probs of the new weights, or `WeightUpdateError` is raised (a server that silently kept old
weights, e.g. vLLM's tied LM head, cannot go unnoticed). The previous update folder is removed once the
new one is verified.
"""

from __future__ import annotations

import asyncio
import shutil
from abc import abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from dnmopd.rollout.base import (
    Rollout,
    RolloutEngine,
    RolloutError,
    RolloutRequest,
    SamplingParams,
    WeightProbe,
    WeightUpdateError,
)
from dnmopd.serving.errors import ServingError
from dnmopd.serving.hf_folder import check_weights_folder, write_hf_folder
from dnmopd.serving.pool import Replica
from dnmopd.serving.token_ids import validate_token_ids
from dnmopd.teachers.http_teacher import resolve_vocab_size


class HttpRolloutEngine(RolloutEngine):
    generate_path: str
    health_path: str
    probe_failure_hint = ""

    def __init__(self, config: Any):
        self.config = config
        self.vocab_size = resolve_vocab_size(config)
        self.pool = config.pool.build(name="rollout")
        self.weight_version = 0
        self._served_folder: Path | None = None

    @abstractmethod
    def _generate_body(self, request: RolloutRequest, params: SamplingParams) -> dict[str, Any]:
        """Generation request for one prompt."""

    @abstractmethod
    def _parse_generation(self, payload: Any, params: SamplingParams) -> tuple[list[int], torch.Tensor, str]:
        """(response ids, log q per token, finish reason) from the answer."""

    @abstractmethod
    async def _load(self, replica: Replica, folder: Path) -> None:
        """Make one replica load the weights in `folder`; raise WeightUpdateError on failure."""

    @abstractmethod
    async def _probe_logprobs(self, replica: Replica, probe: WeightProbe) -> torch.Tensor:
        """The probe's response log-probs as served by one replica."""

    async def generate(self, request: RolloutRequest, params: SamplingParams) -> Rollout:
        validate_token_ids(request.prompt_ids, self.vocab_size, what=f"rollout prompt {request.sample_id}")
        ids, logprobs, finish = await self.pool.post(
            self.generate_path, self._generate_body(request, params), parse=lambda p: self._parse_generation(p, params)
        )
        return Rollout(sample_id=request.sample_id, prompt_ids=list(request.prompt_ids), response_ids=ids,
                       logprobs=logprobs.float(), finish_reason=finish)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], probe: WeightProbe) -> None:
        folder = Path(self.config.update_dir) / f"step-{self.weight_version + 1}"
        write_hf_folder(named_tensors, self.config.model_path, folder)
        self.update_weights_from_disk(folder, probe)

    def update_weights_from_disk(self, folder: str | Path, probe: WeightProbe) -> None:
        """Load `folder` on every replica, then verify each replica with `probe`."""
        folder = check_weights_folder(folder)

        async def run() -> None:
            try:
                for replica in self.pool.replicas:
                    try:
                        await self._load(replica, folder)
                        served = await self._probe_logprobs(replica, probe)
                    except ServingError as error:
                        message = f"rollout server {replica.url}: weight update failed: {error}"
                        raise WeightUpdateError(message) from error
                    try:
                        probe.verify(served, source=f"rollout server {replica.url}")
                    except WeightUpdateError as error:
                        raise WeightUpdateError(f"{error}{self.probe_failure_hint}") from None
            finally:
                await self.aclose()

        asyncio.run(run())
        self.weight_version += 1
        previous, self._served_folder = self._served_folder, folder
        if previous is not None and previous != folder and previous.parent == Path(self.config.update_dir).resolve():
            shutil.rmtree(previous, ignore_errors=True)

    def check(self) -> None:
        """Every replica answers its health endpoint with 200."""

        async def run() -> None:
            try:
                for replica in self.pool.replicas:
                    status, _ = await self.pool.request_to(replica, "GET", self.health_path, timeout_s=60)
                    if status != 200:
                        raise RolloutError(f"rollout server {replica.url}{self.health_path} answered {status}")
            finally:
                await self.aclose()

        asyncio.run(run())

    async def aclose(self) -> None:
        await self.pool.aclose()
