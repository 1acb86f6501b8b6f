"""vLLM teacher: `/v1/completions` prompt-logprob scoring over a replica pool (wire format in serving.vllm_api).

Startup (`check`): every replica answers `GET /health` with 200 and `GET /v1/models` lists `model_path`
(as the served model's `root` or `id`). Ids are validated before sending (vLLM would answer 400).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dnmopd.hf.models import same_model_path
from dnmopd.serving import vllm_api
from dnmopd.serving.servers import HEALTH_PATHS
from dnmopd.serving.token_ids import validate_token_ids
from dnmopd.teachers.base import ScoreRequest, TeacherError
from dnmopd.teachers.http_teacher import HttpTeacher

MAX_TOP_K = 20
"""The most top-k log-probs per position that vLLM returns."""


class VLLMTeacher(HttpTeacher):
    score_path = "/v1/completions"
    health_path = HEALTH_PATHS["vllm"]
    info_path = "/v1/models"

    @dataclass(kw_only=True, slots=True)
    class Config(HttpTeacher.Config):
        model_path: str
        """The HF folder the servers were started with; `/v1/models` must list it."""
        top_k: int = 0
        """Also return the top-k log-probs at every response position (0: off; vLLM allows up to 20)."""

        def __post_init__(self):
            HttpTeacher.Config.__post_init__(self)  # explicit: zero-argument super() fails in slots dataclasses
            if self.top_k > MAX_TOP_K:
                raise ValueError(f"VLLMTeacher.Config.top_k={self.top_k}: vLLM returns at most {MAX_TOP_K}")

        def build(self) -> VLLMTeacher:
            return VLLMTeacher(self)

    def _body(self, requests: Sequence[ScoreRequest]) -> dict[str, Any]:
        return vllm_api.score_body([r.token_ids for r in requests], top_k=self.config.top_k)

    def _answers(self, payload: Any, count: int) -> list[Any]:
        return vllm_api.choices_in_order(payload, count)

    def _parse_scores(self, answer: Any, request: ScoreRequest):
        return vllm_api.parse_score(answer, request.token_ids, request.prompt_len, top_k=self.config.top_k)

    async def greedy(self, prompt_ids: Sequence[int], max_new_tokens: int) -> list[int]:
        validate_token_ids(prompt_ids, self.vocab_size, what=f"teacher {self.name} greedy prompt")
        body = vllm_api.generate_body(prompt_ids, {"max_tokens": max_new_tokens, "temperature": 0})
        return await self.pool.post("/v1/completions", body,
                                    parse=lambda answer: vllm_api.parse_generation(answer)[0])

    def _check_identity(self, url: str, info: Any) -> None:
        served = vllm_api.served_model_paths(info)
        if not any(same_model_path(s, self.config.model_path) for s in served):
            raise TeacherError(
                f"teacher {self.name}: {url} serves {served!r}, expected {self.config.model_path!r} "
                "(a stale server on this port, or a wrong server map?)"
            )
