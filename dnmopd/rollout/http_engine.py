"""What the SGLang and vLLM rollout engines share: the pool, generation requests, weight updates from disk,
weight versions, the sync state shared with the other data-parallel leaders.

A weight update from disk writes the HF-named tensors as a model folder under `update_dir`, asks every replica
to load it under the version tag `step-<n>`, and then probes every replica: the served log-probs of the probe
sequence must equal the expected log-probs of the new weights, or `WeightUpdateError` is raised (a server that
silently kept old weights, e.g. vLLM's tied LM head, cannot go unnoticed). The previous update folder is
removed once the new one is verified. (The SGLang engine can instead broadcast the tensors over a process
group, `rollout.sglang`; no folder then holds the served weights.)

Every answer that reports the version it was computed with (SGLang's `meta_info.weight_version`) is checked
against the last update. A replica that answers from another version (restarted, or it missed an update)
is re-synced from the folder that holds the last update and probed before it serves again; if that fails, or
no folder holds it (a broadcast update), the run stops with `WeightUpdateError`. A stale rollout is never used.
One data-parallel leader updates the shared servers; the others adopt its `sync_state()`, so that every
leader checks versions and can re-sync a replica.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from abc import abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dnmopd.hf.models import resolve_vocab_size, same_model_path
from dnmopd.rollout.base import (
    Rollout,
    RolloutEngine,
    RolloutError,
    RolloutRequest,
    SamplingParams,
    WeightProbe,
    WeightUpdateError,
)
from dnmopd.serving.blocking import run_blocking
from dnmopd.serving.errors import ServingError, StaleReplica
from dnmopd.serving.hf_folder import check_weights_folder, write_hf_folder
from dnmopd.serving.pool import Replica
from dnmopd.serving.token_ids import validate_token_ids

logger = logging.getLogger(__name__)


def version_tag(update: int) -> str:
    """The weight version the engine gives its `update`-th weight update."""
    return f"step-{update}"


@dataclass(frozen=True, slots=True)
class SyncState:
    """What the leader that updated the shared servers knows of what they serve (picklable, for the others)."""

    weight_version: int
    served_folder: Path | None
    """The folder the servers report serving (None: `model_path`)."""
    weights_folder: Path | None
    """A folder holding the weights of `weight_version`, to re-sync a restarted replica from (None: none does)."""
    probe: WeightProbe | None


class HttpRolloutEngine(RolloutEngine):
    shared_across_ranks = True
    generate_path: str
    health_path: str
    probe_failure_hint = ""

    def __init__(self, config: Any):
        self.config = config
        self.vocab_size = resolve_vocab_size(config)
        self.pool = config.pool.build(name="rollout", health_path=self.health_path)
        self.weight_version = 0
        """Number of weight updates served so far (the version tag of the last one is `version_tag(n)`)."""
        self._served_folder: Path | None = None
        self._weights_folder: Path | None = Path(config.model_path)
        """The folder holding the weights of the last update (None after a broadcast update: no folder does)."""
        self._probe: WeightProbe | None = None
        self._resync_locks: dict[str, asyncio.Lock] = {}

    @property
    def served_folder(self) -> Path:
        """The folder the servers serve: the last update folder, or `model_path` before the first update."""
        return self._served_folder or Path(self.config.model_path)

    @property
    def expected_version(self) -> str | None:
        """The version every answer must carry; None before the first update (any start-up version is ours)."""
        return version_tag(self.weight_version) if self.weight_version else None

    @abstractmethod
    def _generate_body(self, request: RolloutRequest, params: SamplingParams) -> dict[str, Any]:
        """Generation request for one prompt."""

    @abstractmethod
    def _parse_generation(self, payload: Any, params: SamplingParams) -> tuple[list[int], torch.Tensor, str]:
        """(response ids, log q per token, finish reason) from the answer."""

    @abstractmethod
    async def _load(self, replica: Replica, folder: Path, version: str) -> None:
        """Make one replica load the weights in `folder` as `version`; raise WeightUpdateError on failure."""

    @abstractmethod
    async def _probe_logprobs(self, replica: Replica, probe: WeightProbe) -> torch.Tensor:
        """The probe's response log-probs as served by one replica."""

    @abstractmethod
    async def _check_served(self, replica: Replica) -> None:
        """Raise RolloutError unless the replica serves `served_folder` (StaleReplica: the right model, but
        another weight version)."""

    def _answer_version(self, payload: Any) -> str | None:
        """The weight version an answer reports (None: the server does not report one)."""
        return None

    async def generate(self, request: RolloutRequest, params: SamplingParams) -> Rollout:
        validate_token_ids(request.prompt_ids, self.vocab_size, what=f"rollout prompt {request.sample_id}")
        ids, logprobs, finish = await self.pool.post(
            self.generate_path, self._generate_body(request, params),
            parse=lambda payload: self._parse_current(payload, params), repair=self._resync,
        )
        return Rollout(sample_id=request.sample_id, prompt_ids=list(request.prompt_ids), response_ids=ids,
                       logprobs=logprobs.float(), finish_reason=finish)

    def _parse_current(self, payload: Any, params: SamplingParams):
        expected = self.expected_version
        answered = self._answer_version(payload) if expected is not None else None
        if answered is not None and answered != expected:
            raise StaleReplica(f"answered from weight version {answered!r}, expected {expected!r} "
                               "(restarted, or it missed an update)")
        return self._parse_generation(payload, params)

    async def _resync(self, replica: Replica) -> None:
        """Load the last update on a replica that answered from other weights, probe it, or stop the run."""
        lock = self._resync_locks.setdefault(replica.url, asyncio.Lock())
        async with lock:
            try:
                await self._check_served(replica)
                return  # a concurrent request has re-synced it already
            except StaleReplica as error:
                if self._weights_folder is None:
                    raise WeightUpdateError(
                        f"rollout server {replica.url} {error}: the weights of {self.expected_version} were "
                        "broadcast (rollout.sync distributed), so no folder holds them and a server restarted "
                        "between two updates gets them only from the next one; the run stops rather than use its "
                        "stale rollouts (resume it: the resumed run sends its weights to every server)") from error
                logger.warning("rollout server %s %s: re-syncing it from %s", replica.url, error, self._weights_folder)
            source = f"rollout server {replica.url} (re-synced from {self._weights_folder})"
            try:
                await self._load(replica, self._weights_folder, self.expected_version)
                served = await self._probe_logprobs(replica, self._probe)
            except (ServingError, WeightUpdateError) as error:
                message = f"{source}: answered from stale weights and the re-sync failed: {error}"
                raise WeightUpdateError(message) from error
            self._probe.verify(served, source=source)
            self.pool.counters["resyncs"] += 1

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], probe: WeightProbe) -> None:
        folder = Path(self.config.update_dir) / version_tag(self.weight_version + 1)
        write_hf_folder(named_tensors, self.config.model_path, folder)
        self.update_weights_from_disk(folder, probe)

    def update_weights_from_disk(self, folder: str | Path, probe: WeightProbe) -> None:
        """Load `folder` on every replica as the next version, then verify each replica with `probe`."""
        folder = check_weights_folder(folder)
        version = version_tag(self.weight_version + 1)

        async def update(replica: Replica) -> None:
            try:
                await self._load(replica, folder, version)
                served = await self._probe_logprobs(replica, probe)
            except ServingError as error:
                raise WeightUpdateError(f"rollout server {replica.url}: weight update failed: {error}") from error
            try:
                probe.verify(served, source=f"rollout server {replica.url}")
            except WeightUpdateError as error:
                raise WeightUpdateError(f"{error}{self.probe_failure_hint}") from None

        run_blocking(self.pool.each_replica(update))
        self.weight_version += 1
        self._probe = probe
        self._weights_folder = folder
        previous, self._served_folder = self._served_folder, folder
        if previous is not None and previous != folder and previous.parent == Path(self.config.update_dir).resolve():
            shutil.rmtree(previous, ignore_errors=True)

    def _verify_every_replica(self, probe: WeightProbe) -> None:
        """Probe every replica after an update; a mismatch or a failed probe raises WeightUpdateError."""
        async def verify(replica: Replica) -> None:
            try:
                served = await self._probe_logprobs(replica, probe)
            except ServingError as error:
                raise WeightUpdateError(f"rollout server {replica.url}: probe after the update failed: {error}") \
                    from error
            probe.verify(served, source=f"rollout server {replica.url}")

        run_blocking(self.pool.each_replica(verify))

    def sync_state(self) -> SyncState:
        """What this engine's updates left the servers serving, for the leaders that did not send them."""
        return SyncState(self.weight_version, self._served_folder, self._weights_folder, self._probe)

    def adopt_sync_state(self, state: SyncState) -> None:
        """Another leader updated the shared servers: check answers against its version, re-sync from its folder."""
        self.weight_version = state.weight_version
        self._served_folder = state.served_folder
        self._weights_folder = state.weights_folder
        self._probe = state.probe

    def check(self) -> None:
        """Every replica answers its health route with 200 and serves `served_folder` at `expected_version`
        (a replica at another version is re-synced); errors name the replica's URL."""
        run_blocking(self.pool.each_replica(self._check_replica))

    async def _check_replica(self, replica: Replica) -> None:
        try:
            status = await self.pool.health_status(replica, timeout_s=60)
            if status != 200:
                raise RolloutError(f"rollout server {replica.url}{self.health_path} answered {status}")
            try:
                await self._check_served(replica)
            except StaleReplica:
                await self._resync(replica)
        except ServingError as error:
            raise RolloutError(f"rollout server {replica.url} failed its check: {error}") from error

    def _check_path(self, replica: Replica, served: Any) -> None:
        if not same_model_path(served, str(self.served_folder)):
            raise RolloutError(f"rollout server {replica.url} serves {served!r}, expected {str(self.served_folder)!r} "
                               "(a stale server on this port, a wrong server map, or one left serving an earlier run's "
                               "weight update: restart it)")

    async def aclose(self) -> None:
        self._resync_locks.clear()
        await self.pool.aclose()
