"""SGLang teacher: prefill-only `/generate` scoring over a replica pool (wire format in serving.sglang_api).

Startup (`check`): every replica answers `GET /health_generate` with 200 (a real 1-token generation) and
`GET /get_model_info` shows `model_path`. Token ids are validated against the vocabulary before sending
(SGLang crashes on an out-of-vocabulary id), and the ids SGLang echoes are checked against those sent.
The pool's counters add up `prompt_tokens` and `cached_tokens` (input tokens the radix cache supplied).
A request's top-k (`ScoreRequest.top_k`, or the config's `top_k` when larger) comes back as flat base64
arrays: 8 bytes per candidate, against about 40 for nested JSON triples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dnmopd.hf.models import same_model_path
from dnmopd.serving import sglang_api
from dnmopd.serving.servers import HEALTH_PATHS
from dnmopd.serving.token_ids import validate_token_ids
from dnmopd.teachers.base import ScoreRequest, TeacherError
from dnmopd.teachers.http_teacher import HttpTeacher


class SGLangTeacher(HttpTeacher):
    scores_topk = True
    score_path = "/generate"
    health_path = HEALTH_PATHS["sglang"]
    info_path = "/get_model_info"
    logprob_start = "prompt"
    """`prompt`: logprob_start_len = P - 1 (see serving.sglang_api); `zero` only for measuring the difference."""

    @dataclass(kw_only=True, slots=True)
    class Config(HttpTeacher.Config):
        model_path: str
        """The HF folder the servers were started with; `/get_model_info.model_path` must equal it."""
        health_timeout_s: float = 60.0
        """Time-out of each startup check request (`/health_generate` runs a real generation)."""

        def build(self) -> SGLangTeacher:
            return SGLangTeacher(self)

    def _body(self, requests: Sequence[ScoreRequest]) -> dict[str, Any]:
        start = self.logprob_start
        if len(requests) == 1:
            return sglang_api.score_body(requests[0].token_ids, requests[0].prompt_len,
                                         top_k=self.top_k(requests[0]), flat_top_k=True, start=start)
        samples = [(r.token_ids, r.prompt_len) for r in requests]
        return sglang_api.batch_score_body(samples, top_k=[self.top_k(r) for r in requests], flat_top_k=True,
                                           start=start)

    def _answers(self, payload: Any, count: int) -> list[Any]:
        return [payload] if count == 1 else sglang_api.parse_batch(payload, count)

    def _parse_scores(self, answer: Any, request: ScoreRequest):
        scores = sglang_api.parse_score(answer, request.token_ids, request.prompt_len, vocab_size=self.vocab_size,
                                        top_k=self.top_k(request), start=self.logprob_start)
        prompt_tokens, cached = sglang_api.cached_tokens(answer)
        self.pool.counters["prompt_tokens"] += prompt_tokens
        self.pool.counters["cached_tokens"] += cached
        return scores

    async def greedy(self, prompt_ids: Sequence[int], max_new_tokens: int) -> list[int]:
        validate_token_ids(prompt_ids, self.vocab_size, what=f"teacher {self.name} greedy prompt")
        body = sglang_api.generate_body(prompt_ids, {"max_new_tokens": max_new_tokens, "temperature": 0})
        return await self.pool.post("/generate", body, parse=lambda answer: sglang_api.parse_generation(answer)[0])

    def _check_identity(self, url: str, info: Any) -> None:
        served = info.get("model_path") if isinstance(info, dict) else None
        if not same_model_path(served, self.config.model_path):
            raise TeacherError(
                f"teacher {self.name}: {url} serves {served!r}, expected {self.config.model_path!r} "
                "(a stale server on this port, or a wrong server map?)"
            )
        if info.get("is_generation") is False:
            raise TeacherError(f"teacher {self.name}: {url} serves an embedding model, not a generative one")
