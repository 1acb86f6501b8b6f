"""vLLM teacher: `/v1/completions` prompt-logprob scoring over a replica pool (wire format in serving.vllm_api).

Startup (`check`): every replica answers `GET /health` with 200 and `GET /v1/models` lists `model_path`
(as the served model's `root` or `id`). Ids are validated before sending (vLLM would answer 400).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dnmopd.serving import vllm_api
from dnmopd.serving.pool import ReplicaPool
from dnmopd.teachers.base import ScoreRequest, TeacherError, TeacherScores
from dnmopd.teachers.http_teacher import HttpTeacher, same_model_path


class VLLMTeacher(HttpTeacher):
    score_path = "/v1/completions"
    health_path = "/health"
    info_path = "/v1/models"

    @dataclass(kw_only=True, slots=True)
    class Config:
        name: str
        """Teacher name (the key the domain routing uses)."""
        model_path: str
        """The HF folder the servers were started with; `/v1/models` must list it."""
        pool: ReplicaPool.Config
        """Replicas, balancing, connection limits, time-outs and retries."""
        vocab_size: int = 0
        """Ids must be below this; 0 reads it from `model_path`/config.json."""
        top_k: int = 0
        """Also return the top-k log-probs at every response position (0: off; vLLM allows up to 20)."""
        batch_request_size: int = 32
        """Samples per POST in the blocking `score_batch` (the async `score` sends one sample per POST)."""
        health_timeout_s: float = 30.0
        """Time-out of each startup check request."""

        def __post_init__(self):
            if not 0 <= self.top_k <= 20 or self.batch_request_size < 1 or self.vocab_size < 0:
                raise ValueError(
                    f"VLLMTeacher.Config: top_k={self.top_k} must be in [0, 20], batch_request_size="
                    f"{self.batch_request_size} >= 1, vocab_size={self.vocab_size} >= 0"
                )

        def build(self) -> VLLMTeacher:
            return VLLMTeacher(self)

    def __init__(self, config: Config):
        super().__init__(config, owner="VLLMTeacher")

    def _body(self, requests: Sequence[ScoreRequest]) -> dict[str, Any]:
        return vllm_api.score_body([r.token_ids for r in requests], top_k=self.config.top_k)

    def _parse(self, payload: Any, requests: Sequence[ScoreRequest]) -> list[TeacherScores]:
        results = []
        for choice, request in zip(vllm_api.choices_in_order(payload, len(requests)), requests, strict=True):
            logprobs, topk_ids, topk_logprobs = vllm_api.parse_score(
                choice, request.token_ids, request.prompt_len, top_k=self.config.top_k
            )
            scores = TeacherScores(logprobs=logprobs, topk_ids=topk_ids, topk_logprobs=topk_logprobs)
            results.append(self._checked(scores, request))
        return results

    def _check_identity(self, url: str, info: Any) -> None:
        models = info.get("data") if isinstance(info, dict) else None
        served = [m.get(key) for m in models or [] for key in ("root", "id")]
        if not any(same_model_path(s, self.config.model_path) for s in served):
            raise TeacherError(
                f"teacher {self.name}: {url} serves {served!r}, expected {self.config.model_path!r} "
                "(a stale server on this port, or a wrong server map?)"
            )
