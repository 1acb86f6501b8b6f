"""The `TeacherScorer` interface: token ids + response span -> the teacher's log-prob of every response token.

A sample is the student's own token ids, prompt followed by response, and the length of the prompt. The
teacher returns, for each response position t (absolute position prompt_len + t),

    logprobs[t] = log p_teacher(token_ids[prompt_len + t] | token_ids[:prompt_len + t])

at temperature 1 on the raw logits (no sampling processing). Optionally also the top-k of that distribution
(asked per request, `ScoreRequest.top_k`, by backends with `scores_topk`; the top-k loss needs it) and, from
the in-process backend only, the teacher's final (post-norm) hidden states at the positions that predict the
response tokens, for the fused full-vocab reverse KL.

Backends: `inprocess` (transformers model in this process), `sglang` and `vllm` (HTTP servers). All share
the async `score` (one sample, sent as soon as the caller has it), the async `score_many` (per-sample
outcomes of many samples; the HTTP teachers batch them) and the blocking `score_batch`.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from dnmopd.serving.blocking import BlockingClient, run_blocking
from dnmopd.serving.errors import ServingError

TOPK_LOGPROB_SLACK = 1e-4
"""How far above 0 a returned log-prob (or a top-k row's total) may lie: float32 rounding, not a bad answer."""


class TeacherError(RuntimeError):
    """A sample could not be scored (after retries) or the teacher failed a startup check."""


@dataclass(frozen=True, slots=True)
class ScoreRequest:
    """One sample to score: `token_ids` = prompt + response; the response is `token_ids[prompt_len:]`. With
    `top_k` > 0 the teacher also returns its k most likely tokens at each response position (at least k: a
    backend configured with a larger `top_k` returns its own)."""

    token_ids: tuple[int, ...]
    prompt_len: int
    top_k: int = 0

    def __post_init__(self):
        object.__setattr__(self, "token_ids", tuple(int(t) for t in self.token_ids))
        if not 1 <= self.prompt_len < len(self.token_ids):
            raise ValueError(
                f"ScoreRequest.prompt_len={self.prompt_len}: needs 1 <= prompt_len < len(token_ids)="
                f"{len(self.token_ids)} (a non-empty prompt and a non-empty response)"
            )
        if self.top_k < 0:
            raise ValueError(f"ScoreRequest.top_k={self.top_k}: must be >= 0 (0: no top-k)")

    @property
    def response_len(self) -> int:
        return len(self.token_ids) - self.prompt_len

    @property
    def response_ids(self) -> tuple[int, ...]:
        return self.token_ids[self.prompt_len :]


@dataclass(slots=True)
class TeacherScores:
    """The teacher's view of one sample's response (R = response length).

    `logprobs` float32 [R]; `topk_ids` int64 [R, k] and `topk_logprobs` float32 [R, k] (descending) when
    top-k was asked for; `hidden_states` [R, hidden] (in-process only) when asked for.
    """

    logprobs: torch.Tensor
    topk_ids: torch.Tensor | None = None
    topk_logprobs: torch.Tensor | None = None
    hidden_states: torch.Tensor | None = None

    def check(self, request: ScoreRequest, *, source: str) -> TeacherScores:
        """Reject wrong lengths, non-finite values (a silent NaN would poison the DN statistics) and a top-k that
        is missing, too short, not descending, repeats a token or holds more than all the probability."""
        if tuple(self.logprobs.shape) != (request.response_len,):
            raise TeacherError(
                f"{source}: got {tuple(self.logprobs.shape)} log-probs for a response of {request.response_len}"
            )
        if not bool(torch.isfinite(self.logprobs).all()):
            raise TeacherError(f"{source}: non-finite teacher log-probs {self.logprobs.tolist()}")
        if request.top_k:
            self._check_topk(request, source)
        return self

    def _check_topk(self, request: ScoreRequest, source: str) -> None:
        ids, values = self.topk_ids, self.topk_logprobs
        if ids is None or values is None:
            raise TeacherError(f"{source}: top-{request.top_k} log-probs were asked for and not returned")
        if ids.shape != values.shape or ids.dim() != 2 or ids.shape[0] != request.response_len \
                or ids.shape[1] < request.top_k:
            raise TeacherError(f"{source}: top-k ids {tuple(ids.shape)} / log-probs {tuple(values.shape)} for a "
                               f"response of {request.response_len} and top_k {request.top_k}")
        if not bool(torch.isfinite(values).all()) or bool((values > TOPK_LOGPROB_SLACK).any()):
            raise TeacherError(f"{source}: top-k log-probs must be finite and <= 0")
        if bool((values[:, 1:] > values[:, :-1]).any()):
            raise TeacherError(f"{source}: top-k log-probs are not in descending order")
        if bool((ids.sort(dim=1).values.diff(dim=1) == 0).any()):
            raise TeacherError(f"{source}: a top-k row names one token twice")
        if bool((values.double().logsumexp(dim=1) > TOPK_LOGPROB_SLACK).any()):
            raise TeacherError(f"{source}: a top-k row holds more than all the probability")


class TeacherScorer(BlockingClient, ABC):
    """Scores response tokens with one teacher model. Built from its backend's `Config.build()`."""

    returns_hidden_states: ClassVar[bool] = False
    """The backend can return the teacher's final hidden states (`Config.return_hidden_states`), which the
    full-vocabulary loss and the probe need."""
    scores_topk: ClassVar[bool] = False
    """The backend honours `ScoreRequest.top_k` (any k), which the top-k loss needs."""
    name: str
    vocab_size: int

    @abstractmethod
    async def score(self, request: ScoreRequest) -> TeacherScores:
        """Score one sample. Raises `TeacherError` (or a `dnmopd.serving.errors.ServingError`) on failure."""

    async def score_many(self, requests: Sequence[ScoreRequest]) -> list[TeacherScores | Exception]:
        """Score all requests concurrently; a sample that fails has its error (`TeacherError`, `ServingError`)
        in its place, so one bad sample costs only itself."""
        outcomes = await asyncio.gather(*(self.score(r) for r in requests), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, TeacherError | ServingError):
                raise outcome
        return outcomes

    def score_batch(self, requests: Sequence[ScoreRequest]) -> list[TeacherScores]:
        """Blocking convenience: score all requests concurrently, in order; the first failure is raised."""
        async def score_all() -> list[TeacherScores]:
            return list(await asyncio.gather(*(self.score(r) for r in requests)))

        return run_blocking(score_all())

    @abstractmethod
    async def greedy(self, prompt_ids: Sequence[int], max_new_tokens: int) -> list[int]:
        """The teacher's greedy continuation of `prompt_ids` (an eos it generates ends it and is kept); for the
        self-test (`teachers.self_test`)."""

    def check(self) -> None:
        """Startup checks (health, identity, vocabulary). Raises `TeacherError` when one fails."""
        return None
