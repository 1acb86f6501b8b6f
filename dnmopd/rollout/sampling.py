"""The sampling distribution q of `rollout.base` (temperature, then top-k, then top-p) and draws from it.

Conventions follow vLLM and transformers: top-k keeps the k largest logits (ties at the k-th value kept);
top-p sorts ascending, drops the tokens whose cumulative probability is <= 1 - top_p and always keeps the
most likely token.
"""

from __future__ import annotations

import torch

from dnmopd.rollout.base import SamplingParams


def sampling_logprobs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """log q over the vocabulary for logits [B, V] (float32); -inf outside the kept set. Greedy: raw."""
    logits = logits.float()
    if params.greedy:
        return torch.log_softmax(logits, dim=-1)
    scaled = logits / params.temperature
    if params.top_k != -1 and params.top_k < scaled.shape[-1]:
        kth = scaled.topk(params.top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if params.top_p < 1:
        ascending, order = scaled.sort(dim=-1)
        cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1 - params.top_p
        drop[..., -1] = False
        scaled = scaled.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    return torch.log_softmax(scaled, dim=-1)


def draw(logq: torch.Tensor, params: SamplingParams, generators: list[torch.Generator | None]) -> torch.Tensor:
    """One token per row of log q [B, V]: argmax when greedy, else a draw with the row's own generator."""
    if params.greedy:
        return logq.argmax(dim=-1)
    probs = logq.exp()
    return torch.cat([torch.multinomial(row, 1, generator=g) for row, g in zip(probs, generators, strict=True)])
