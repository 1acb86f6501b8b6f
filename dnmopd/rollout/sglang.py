"""SGLang rollout engine: `/generate` from token ids with log-probs; weight updates from disk or over a process
group (`rollout.sync`: disk | distributed).

SGLang reports log_softmax(logits / T) before top-k/top-p truncation. To report the sampled distribution
(`rollout.base`) the engine, when top_k is on, also asks for the top-k log-probs and subtracts their
logsumexp (the mass top-k keeps); top_p < 1 cannot be converted from the answer and is refused.
SGLang ignores `sampling_seed` unless the server runs with `--enable-deterministic-inference`, so a seed is
refused unless `deterministic_server` says the server was started that way. Weight updates use
`POST /update_weights_from_disk` with the version tag (synchronous; flushes the radix cache); every answer's
`meta_info.weight_version` and `/get_model_info` (`model_path`, `weight_version`) show what a replica serves.

With `join_weight_group` (the trainer calls it on the sending rank under `rollout.sync: distributed`) every
update is broadcast over a process group instead (`serving.weight_group`): no folder is written. Joining labels
every server with the engine's current version, so a server that restarts loses the label with the group: before
each update the engine reads every server's version, and if one lost it (or the last update failed) it drops
the group on every server and forms a new one, whose broadcast then brings every server to the new version. The
probe follows, as after an update from disk. A failed broadcast leaves the servers labelled `incomplete-<version>`
(some buckets may have loaded), so that no answer from them is taken for the last good version.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dnmopd.rollout.base import RolloutError, RolloutRequest, SamplingParams, WeightProbe, WeightUpdateError
from dnmopd.rollout.http_engine import HttpRolloutEngine, version_tag
from dnmopd.serving import sglang_api
from dnmopd.serving.blocking import run_blocking
from dnmopd.serving.errors import RequestRejected, ResponseFormatError, ServingError, StaleReplica, describe
from dnmopd.serving.pool import Replica, ReplicaPool
from dnmopd.serving.servers import HEALTH_PATHS
from dnmopd.serving.weight_group import SendStats, WeightGroup, WeightGroupError

logger = logging.getLogger(__name__)


def sglang_sampling(params: SamplingParams, seed: int | None, *, deterministic_server: bool) -> dict[str, Any]:
    """SamplingParams in SGLang's vocabulary; refuses what SGLang cannot report faithfully."""
    if params.top_p < 1 and not params.greedy:
        raise RolloutError(
            f"top_p={params.top_p}: SGLang reports log-probs before top-p truncation, so the log-prob of the "
            "distribution actually sampled cannot be recovered; use top_p=1 or the vllm/inprocess backend"
        )
    if seed is not None and not deterministic_server:
        raise RolloutError(
            "SGLang ignores sampling_seed unless the server runs with --enable-deterministic-inference; "
            "start it so and set deterministic_server=true, or sample with seed=None"
        )
    return params.request_fields(seed, max_tokens="max_new_tokens", seed_field="sampling_seed")


def sampled_logprobs(reported: torch.Tensor, top_values: torch.Tensor | None) -> torch.Tensor:
    """log q from SGLang's log_softmax(z / T): renormalize over the top-k kept set when top-k is on."""
    if top_values is None:
        return reported
    return reported - torch.logsumexp(top_values.double(), dim=-1)


class SGLangRollout(HttpRolloutEngine):
    generate_path = "/generate"
    health_path = HEALTH_PATHS["sglang"]
    distributed_sync = True

    @dataclass(kw_only=True, slots=True)
    class Config:
        model_path: str
        """HF folder the servers were started with (config, tokenizer files copied into update folders)."""
        pool: ReplicaPool.Config
        """Replicas, balancing, limits, time-outs and retries (generation can be long: raise the time-out)."""
        update_dir: str
        """Where weight updates are written as HF folders (must be readable by the servers)."""
        vocab_size: int = 0
        """Prompt ids must be below this; 0 reads it from `model_path`/config.json."""
        deterministic_server: bool = False
        """The servers run with --enable-deterministic-inference (otherwise seeds are refused)."""

        def build(self) -> SGLangRollout:
            return SGLangRollout(self)

    def __init__(self, config: Config):
        super().__init__(config)
        self._group_config: WeightGroup.Config | None = None
        self._group: WeightGroup | None = None
        self.last_send: SendStats | None = None
        """Size and time of the last broadcast update."""

    def _top_k_conversion(self, params: SamplingParams) -> int:
        return params.top_k if params.top_k != -1 and not params.greedy else 0

    def _generate_body(self, request: RolloutRequest, params: SamplingParams) -> dict[str, Any]:
        sampling = sglang_sampling(params, params.sample_seed(request.sample_id),
                                   deterministic_server=self.config.deterministic_server)
        return sglang_api.generate_body(request.prompt_ids, sampling, top_logprobs_num=self._top_k_conversion(params))

    def _parse_generation(self, payload: Any, params: SamplingParams):
        top_k = self._top_k_conversion(params)
        ids, reported, finish, top = sglang_api.parse_generation(payload, top_logprobs_num=top_k)
        return ids, sampled_logprobs(reported, top[1] if top is not None else None), finish

    def _answer_version(self, payload: Any) -> str | None:
        meta = payload.get("meta_info") if isinstance(payload, dict) else None
        version = meta.get("weight_version") if isinstance(meta, dict) else None
        if not isinstance(version, str):
            raise ResponseFormatError(f"/generate answer without meta_info.weight_version: {describe(payload)}")
        return version

    async def _load(self, replica: Replica, folder: Path, version: str) -> None:
        body = {"model_path": str(folder), "weight_version": version, "flush_cache": True}
        try:
            answer = await self.pool.post("/update_weights_from_disk", body, replica=replica)
        except RequestRejected as error:
            raise WeightUpdateError(f"rollout server {replica.url} refused the update: {error}") from error
        if not isinstance(answer, dict) or answer.get("success") is not True:
            raise WeightUpdateError(f"rollout server {replica.url}: update_weights_from_disk answered {answer!r}")

    async def _probe_logprobs(self, replica: Replica, probe: WeightProbe) -> torch.Tensor:
        body = sglang_api.score_body(probe.token_ids, probe.prompt_len)
        answer = await self.pool.post("/generate", body, replica=replica)
        return sglang_api.parse_score(answer, probe.token_ids, probe.prompt_len, vocab_size=self.vocab_size)[0]

    async def _check_served(self, replica: Replica) -> None:
        info = await self.pool.get(replica, "/get_model_info")
        info = info if isinstance(info, dict) else {}
        served, version = info.get("model_path"), info.get("weight_version")
        if self.expected_version is not None and version != self.expected_version:
            raise StaleReplica(f"serves weight version {version!r}, expected {self.expected_version!r}")
        self._check_path(replica, served)

    # -- weight updates over a process group -----------------------------------------------------------------

    def join_weight_group(self, config: WeightGroup.Config) -> None:
        """Form the weight-update group with every replica (this process is its rank 0, whatever its global rank)
        and send every later update over it. Raises WeightUpdateError naming a server that did not join."""
        self._group_config = config
        self._form_group()

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], probe: WeightProbe) -> None:
        if self._group_config is None:
            return super().update_weights(named_tensors, probe)
        version = version_tag(self.weight_version + 1)
        if self._group is None or self._group.broken or self._servers_left_group():
            self._form_group()
        try:
            self.last_send = self._group.send(named_tensors, version)
        except WeightGroupError as error:
            raise WeightUpdateError(f"rollout servers: {error}") from error
        self._verify_every_replica(probe)
        self.weight_version += 1
        self._probe = probe
        self._weights_folder = None

    def _servers_left_group(self) -> bool:
        """Whether a server lost the group's label (restarted since it joined) or does not answer."""
        expected = version_tag(self.weight_version)

        async def label(replica: Replica) -> str | None:
            try:
                status, text = await self.pool.request_to(replica, "GET", "/get_model_info",
                                                          timeout_s=self._group_config.timeout_s)
                info = json.loads(text) if status == 200 else None
            except (ServingError, ValueError):
                return None
            return info.get("weight_version") if isinstance(info, dict) else None

        async def labels() -> list[str | None]:
            return list(await asyncio.gather(*(label(replica) for replica in self.pool.replicas)))

        replicas = zip(self.pool.replicas, run_blocking(labels()), strict=True)
        lost = [replica.url for replica, version in replicas if version != expected]
        if lost:
            logger.warning("rollout servers %s left the weight-update group (restarted?): forming a new one", lost)
        return bool(lost)

    def _form_group(self) -> None:
        """Drop the old group everywhere, wait (within join_timeout_s) until every server is healthy, form a new
        group and label every server with the current version."""
        config = self._group_config
        if self._group is not None:
            self._group.close()
            run_blocking(self._group.drop_on_servers())
            self._group = None
        deadline = time.monotonic() + config.join_timeout_s
        for replica in self.pool.replicas:
            run_blocking(self._wait_healthy(replica, deadline))
        try:
            self._group = WeightGroup(config, self.pool, name=f"dnmopd-weights-{uuid.uuid4().hex[:12]}",
                                      version=version_tag(self.weight_version))
        except ServingError as error:
            raise WeightUpdateError(f"rollout servers: {error}") from error

    async def _wait_healthy(self, replica: Replica, deadline: float) -> None:
        while True:
            try:
                status = await self.pool.health_status(replica, timeout_s=max(1.0, deadline - time.monotonic()))
            except ServingError as error:
                status, problem = 0, str(error)
            else:
                problem = f"{self.health_path} answered {status}"
            if status == 200:
                return
            if time.monotonic() >= deadline:
                raise WeightUpdateError(f"rollout server {replica.url} is not healthy within "
                                        f"{self._group_config.join_timeout_s:g} s ({problem}): it cannot join the "
                                        "weight-update group")
            await asyncio.sleep(1.0)

    async def aclose(self) -> None:
        if self._group is not None:
            self._group.close()
            await self._group.drop_on_servers()
            self._group = None
        await super().aclose()
