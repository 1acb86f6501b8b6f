"""In-process teacher: a Hugging Face transformers causal LM inside the trainer process (CPU or GPU).

Sequences are right-padded into micro-batches of at most `max_batch_tokens` padded tokens (right padding
never changes a causal model's outputs at real positions). The decoder runs once per micro-batch; the LM
head and log-softmax run only on the response positions, `logit_chunk_tokens` at a time, so the
[tokens, vocab] logits of the whole batch never exist at once. This is the only backend that can return
the teacher's final hidden states (for the fused full-vocab reverse KL, together with `output_weight`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dnmopd.hf.models import DTYPES, load_causal_lm, model_vocab_size
from dnmopd.serving.token_ids import validate_token_ids
from dnmopd.teachers.base import ScoreRequest, TeacherScorer, TeacherScores


class InProcessTeacher(TeacherScorer):
    @dataclass(kw_only=True, slots=True)
    class Config:
        name: str
        """Teacher name (the key the domain routing uses)."""
        model_path: str
        """Hugging Face model folder."""
        device: str = "cpu"
        """torch device for the teacher, e.g. `cpu`, `cuda`, `cuda:1`."""
        dtype: str = "float32"
        """Parameter dtype: float32, bfloat16 or float16."""
        max_batch_tokens: int = 16384
        """Padded tokens (batch x longest sequence) per decoder forward."""
        logit_chunk_tokens: int = 4096
        """Response positions per LM-head + log-softmax call (bounds the fp32 [chunk, vocab] logits)."""
        top_k: int = 0
        """Also return the top-k log-probs and ids at every response position (0: off)."""
        return_hidden_states: bool = False
        """Also return the final hidden states that predict each response token."""
        attn_implementation: str = "sdpa"
        """transformers attention implementation (`sdpa`, `eager`, `flash_attention_2`)."""

        def __post_init__(self):
            if self.dtype not in DTYPES:
                raise ValueError(f"InProcessTeacher.Config.dtype={self.dtype!r}: use one of {sorted(DTYPES)}")
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
        self.model = model if model is not None else load_causal_lm(
            config.model_path, device=config.device, dtype=config.dtype,
            attn_implementation=config.attn_implementation,
        )
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

    @torch.no_grad()  # not inference_mode: hidden states may enter autograd graphs as constants
    def _score_group(self, requests: list[ScoreRequest]) -> list[TeacherScores]:
        device = self.output_weight.device
        longest = max(len(r.token_ids) for r in requests)
        input_ids = torch.zeros(len(requests), longest, dtype=torch.long)
        attention_mask = torch.zeros(len(requests), longest, dtype=torch.long)
        for row, request in enumerate(requests):
            input_ids[row, : len(request.token_ids)] = torch.tensor(request.token_ids)
            attention_mask[row, : len(request.token_ids)] = 1
        hidden = self.model.get_decoder()(
            input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)
        ).last_hidden_state
        # position p predicts token p+1: the response tokens [P, L) are predicted at [P-1, L-1)
        predicting = [hidden[row, r.prompt_len - 1 : len(r.token_ids) - 1] for row, r in enumerate(requests)]
        targets = torch.cat([torch.tensor(r.response_ids) for r in requests]).to(device)
        logprobs, topk_logprobs, topk_ids = self._head_logprobs(torch.cat(predicting), targets)
        sizes = [r.response_len for r in requests]
        return [
            TeacherScores(
                logprobs=lp.float().cpu(),
                topk_ids=ids.cpu() if ids is not None else None,
                topk_logprobs=tlp.float().cpu() if tlp is not None else None,
                hidden_states=h if self.config.return_hidden_states else None,
            )
            for lp, tlp, ids, h in zip(
                logprobs.split(sizes), _split_or_none(topk_logprobs, sizes), _split_or_none(topk_ids, sizes),
                predicting, strict=True,
            )
        ]

    def _head_logprobs(self, hidden: torch.Tensor, targets: torch.Tensor):
        head = self.model.get_output_embeddings()
        chosen, top_values, top_ids = [], [], []
        for start in range(0, hidden.shape[0], self.config.logit_chunk_tokens):
            logits = head(hidden[start : start + self.config.logit_chunk_tokens]).float()
            logprobs = torch.log_softmax(logits, dim=-1)
            chosen.append(logprobs.gather(1, targets[start : start + logits.shape[0], None]).squeeze(1))
            if self.config.top_k:
                values, ids = logprobs.topk(min(self.config.top_k, logprobs.shape[-1]), dim=-1)
                top_values.append(values)
                top_ids.append(ids)
        if not self.config.top_k:
            return torch.cat(chosen), None, None
        return torch.cat(chosen), torch.cat(top_values), torch.cat(top_ids)

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


def _split_or_none(tensor: torch.Tensor | None, sizes: list[int]):
    return tensor.split(sizes) if tensor is not None else [None] * len(sizes)
