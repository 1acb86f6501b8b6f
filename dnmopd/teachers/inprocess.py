"""In-process teacher: a Hugging Face transformers causal LM inside the trainer process (CPU or GPU).

Sequences are grouped into micro-batches of at most `max_batch_tokens` padded tokens, each scored by
`dnmopd.hf.inprocess.score_responses` (one decoder forward, the LM head `logit_chunk_tokens` response
positions at a time). This is the only backend that can return the teacher's final hidden states (for the
fused full-vocab reverse KL, together with `output_weight`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from dnmopd.hf.inprocess import InProcessModel, score_responses
from dnmopd.hf.models import model_vocab_size
from dnmopd.serving.token_ids import validate_token_ids
from dnmopd.teachers.base import ScoreRequest, TeacherScorer, TeacherScores


class InProcessTeacher(TeacherScorer):
    returns_hidden_states: ClassVar[bool] = True
    scores_topk: ClassVar[bool] = True

    @dataclass(kw_only=True, slots=True)
    class Config(InProcessModel):
        name: str
        """Teacher name (the key the domain routing uses)."""
        max_batch_tokens: int = 16384
        """Padded tokens (batch x longest sequence) per decoder forward."""
        logit_chunk_tokens: int = 4096
        """Response positions per LM-head + log-softmax call (bounds the fp32 [chunk, vocab] logits)."""
        top_k: int = 0
        """Also return the top-k log-probs and ids at every response position (0: off; a request may ask for
        more)."""
        return_hidden_states: bool = False
        """Also return the final hidden states that predict each response token."""

        def __post_init__(self):
            InProcessModel.__post_init__(self)  # explicit: zero-argument super() fails in slots dataclasses
            for key in ("max_batch_tokens", "logit_chunk_tokens"):
                if getattr(self, key) < 1:
                    raise ValueError(f"InProcessTeacher.Config.{key}={getattr(self, key)}: must be >= 1")
            if self.top_k < 0:
                raise ValueError(f"InProcessTeacher.Config.top_k={self.top_k}: must be >= 0 (0 turns it off)")

        def build(self) -> InProcessTeacher:
            return InProcessTeacher(self)

    def __init__(self, config: Config, model: torch.nn.Module | None = None):
        self.config = config
        self.name = config.name
        self.model = model if model is not None else config.load()
        self.vocab_size = model_vocab_size(self.model)
        self._queue: list[tuple[ScoreRequest, asyncio.Future]] = []
        self._drainer: asyncio.Task | None = None

    @property
    def output_weight(self) -> torch.Tensor:
        """The LM-head weight [vocab, hidden] that maps `hidden_states` to logits."""
        return self.model.get_output_embeddings().weight

    # -- blocking path -------------------------------------------------------------------------------------

    def score_batch(self, requests: Sequence[ScoreRequest]) -> list[TeacherScores]:
        for i, request in enumerate(requests):
            validate_token_ids(request.token_ids, self.vocab_size, what=f"{self.name} sample {i}")
        results: list[TeacherScores | None] = [None] * len(requests)
        for group in self._micro_batches(requests):
            for index, scores in zip(group, self._score_group([requests[i] for i in group]), strict=True):
                results[index] = scores.check(requests[index], source=f"teacher {self.name}")
        return results  # type: ignore[return-value]

    def _micro_batches(self, requests: Sequence[ScoreRequest]) -> list[list[int]]:
        order = sorted(range(len(requests)), key=lambda i: -len(requests[i].token_ids))
        groups: list[list[int]] = []
        for index in order:
            longest = len(requests[groups[-1][0]].token_ids) if groups else 0
            if groups and longest * (len(groups[-1]) + 1) <= self.config.max_batch_tokens:
                groups[-1].append(index)
            else:
                groups.append([index])
        return groups

    def _score_group(self, requests: list[ScoreRequest]) -> list[TeacherScores]:
        """One forward for the group, at the group's largest top-k; each request keeps the k it gets."""
        top_k = max(self.config.top_k, *(r.top_k for r in requests))
        scored = score_responses(self.model, [(r.token_ids, r.prompt_len) for r in requests],
                                 chunk_tokens=self.config.logit_chunk_tokens, top_k=top_k)
        results = []
        for request, s in zip(requests, scored, strict=True):
            keep = max(self.config.top_k, request.top_k)
            results.append(TeacherScores(
                logprobs=s.logprobs, topk_ids=s.topk_ids[:, :keep] if keep else None,
                topk_logprobs=s.topk_logprobs[:, :keep] if keep else None,
                hidden_states=s.hidden_states if self.config.return_hidden_states else None))
        return results

    async def greedy(self, prompt_ids: Sequence[int], max_new_tokens: int) -> list[int]:
        validate_token_ids(prompt_ids, self.vocab_size, what=f"{self.name} greedy prompt")
        return await asyncio.to_thread(self._greedy, list(prompt_ids), max_new_tokens)

    @torch.no_grad()
    def _greedy(self, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
        device = self.model.get_output_embeddings().weight.device
        ids = torch.tensor([prompt_ids], device=device)
        output = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                     do_sample=False, top_p=None, top_k=None, temperature=None,
                                     pad_token_id=self.model.generation_config.pad_token_id or 0)
        return output[0, len(prompt_ids):].tolist()

    # -- async path: requests arriving while a forward runs are batched together ---------------------------

    async def score(self, request: ScoreRequest) -> TeacherScores:
        validate_token_ids(request.token_ids, self.vocab_size, what=f"{self.name} sample")
        future = asyncio.get_running_loop().create_future()
        self._queue.append((request, future))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                results = await asyncio.to_thread(self.score_batch, [request for request, _ in batch])
            except Exception as error:  # noqa: BLE001 - handed to every waiting caller
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

