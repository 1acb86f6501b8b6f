"""SGLang rollout engine: `/generate` from token ids with log-probs; weight updates from disk.

SGLang reports log_softmax(logits / T) before top-k/top-p truncation. To report the sampled distribution
(`rollout.base`) the engine, when top_k is on, also asks for the top-k log-probs and subtracts their
logsumexp (the mass top-k keeps); top_p < 1 cannot be converted from the answer and is refused.
SGLang ignores `sampling_seed` unless the server runs with `--enable-deterministic-inference`, so a seed is
refused unless `deterministic_server` says the server was started that way. Weight updates use
`POST /update_weights_from_disk` with the version tag (synchronous; flushes the radix cache); every answer's
`meta_info.weight_version` and `/get_model_info` (`model_path`, `weight_version`) show what a replica serves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dnmopd.rollout.base import RolloutError, RolloutRequest, SamplingParams, WeightProbe, WeightUpdateError
from dnmopd.rollout.http_engine import HttpRolloutEngine
from dnmopd.serving import sglang_api
from dnmopd.serving.errors import RequestRejected, ResponseFormatError, StaleReplica, describe
from dnmopd.serving.pool import Replica, ReplicaPool
from dnmopd.serving.servers import HEALTH_PATHS


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
