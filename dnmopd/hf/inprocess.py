"""A Hugging Face causal LM run inside this process, as the in-process rollout engine and teacher share it: the
options that load it (`InProcessModel`) and the log-probs it gives a sequence's response tokens
(`score_responses`, what the teacher returns and what the rollout engine's weight probe reads).

Sequences are right-padded (right padding never changes a causal model's outputs at real positions). The
decoder runs once; the LM head and log-softmax run only on the response positions, `chunk_tokens` at a
time, so the [tokens, vocab] logits of the whole batch never exist at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from dnmopd.hf.models import DTYPES, load_causal_lm


@dataclass(kw_only=True, slots=True)
class InProcessModel:
    """Where and how an in-process backend loads its model (the base of their `Config`s)."""

    model_path: str
    """Hugging Face model folder."""
    device: str = "cpu"
    """torch device, e.g. `cpu`, `cuda`, `cuda:1`."""
    dtype: str = "float32"
    """Parameter dtype: float32, bfloat16 or float16."""
    attn_implementation: str = "sdpa"
    """transformers attention implementation (`sdpa`, `eager`, `flash_attention_2`)."""

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ValueError(f"{type(self).__qualname__}.dtype={self.dtype!r}: use one of {sorted(DTYPES)}")

    def load(self) -> torch.nn.Module:
        return load_causal_lm(self.model_path, device=self.device, dtype=self.dtype,
                              attn_implementation=self.attn_implementation)


class ResponseScores(NamedTuple):
    """One sequence's response (R tokens) under the model at temperature 1."""

    logprobs: torch.Tensor
    """float32 [R] on the CPU: log p(response token | prefix)."""
    topk_logprobs: torch.Tensor | None
    """float32 [R, k] on the CPU, descending (None unless top_k)."""
    topk_ids: torch.Tensor | None
    """int64 [R, k] on the CPU (None unless top_k)."""
    hidden_states: torch.Tensor
    """[R, hidden] on the model's device: the final hidden states that predict the response tokens."""


@torch.no_grad()  # not inference_mode: hidden states may enter autograd graphs as constants
def score_responses(model: torch.nn.Module, sequences: Sequence[tuple[Sequence[int], int]], *,
                    chunk_tokens: int = 4096, top_k: int = 0) -> list[ResponseScores]:
    """The response log-probs of each `(token_ids, prompt_len)` sequence (the response is token_ids[prompt_len:]),
    all decoded in one forward."""
    device = model.get_output_embeddings().weight.device
    longest = max(len(ids) for ids, _ in sequences)
    input_ids = torch.zeros(len(sequences), longest, dtype=torch.long)
    attention_mask = torch.zeros(len(sequences), longest, dtype=torch.long)
    for row, (ids, _) in enumerate(sequences):
        input_ids[row, : len(ids)] = torch.tensor(list(ids))
        attention_mask[row, : len(ids)] = 1
    decoder = model.get_decoder()
    hidden = decoder(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)).last_hidden_state
    # position p predicts token p+1: the response tokens [P, L) are predicted at [P-1, L-1)
    predicting = [hidden[row, prompt_len - 1 : len(ids) - 1] for row, (ids, prompt_len) in enumerate(sequences)]
    targets = torch.cat([torch.tensor(list(ids[prompt_len:])) for ids, prompt_len in sequences]).to(device)
    logprobs, topk_logprobs, topk_ids = _head_logprobs(model, torch.cat(predicting), targets, chunk_tokens, top_k)
    sizes = [len(ids) - prompt_len for ids, prompt_len in sequences]
    return [
        ResponseScores(lp.float().cpu(), tlp.float().cpu() if tlp is not None else None,
                       ids.cpu() if ids is not None else None, h)
        for lp, tlp, ids, h in zip(logprobs.split(sizes), _split_or_none(topk_logprobs, sizes),
                                   _split_or_none(topk_ids, sizes), predicting, strict=True)
    ]


def _head_logprobs(model: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, chunk_tokens: int,
                   top_k: int):
    head = model.get_output_embeddings()
    chosen, top_values, top_ids = [], [], []
    for start in range(0, hidden.shape[0], chunk_tokens):
        logprobs = torch.log_softmax(head(hidden[start : start + chunk_tokens]).float(), dim=-1)
        chosen.append(logprobs.gather(1, targets[start : start + logprobs.shape[0], None]).squeeze(1))
        if top_k:
            values, ids = logprobs.topk(min(top_k, logprobs.shape[-1]), dim=-1)
            top_values.append(values)
            top_ids.append(ids)
    if not top_k:
        return torch.cat(chosen), None, None
    return torch.cat(chosen), torch.cat(top_values), torch.cat(top_ids)


def _split_or_none(tensor: torch.Tensor | None, sizes: list[int]):
    return tensor.split(sizes) if tensor is not None else [None] * len(sizes)
