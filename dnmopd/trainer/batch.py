"""The padded tensors of one rank's scored samples, and their split into forward/backward micro-batches.

Legend: B responses, S = longest prompt + response, T = longest response.
Response token t of row i is `tokens[i, prompt_lens[i] + t]`; it is predicted by the hidden state at
position `prompt_lens[i] + t - 1`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch
import torch.distributed as dist

from dnmopd.trainer.collectives import active, broadcast_object, broadcast_tensor


@dataclass
class TrainBatch:
    tokens: torch.Tensor
    """int64 [B, S] prompt + response, right-padded with 0."""
    prompt_lens: torch.Tensor
    """int64 [B]"""
    response_mask: torch.Tensor
    """bool [B, T]: real response tokens."""
    rollout_logp: torch.Tensor
    """float32 [B, T] log-prob of each response token under the distribution it was sampled from."""
    target_logp: torch.Tensor
    """float32 [B, T] the routed teacher's log-probs (0 where the sample is masked)."""
    advantages: torch.Tensor | None
    """float32 [B, T] explicit advantages (GRPO, injection); None: w * (target - old) is used."""
    sample_valid: torch.Tensor
    """bool [B]: false when the sample's teacher failed (it trains with advantage 0)."""
    domain_ids: torch.Tensor
    """int64 [B] index into the run's domains."""
    weights: torch.Tensor | None = None
    """float32 [B] per-response advantage multiplier (the DN weight of its domain); None: all 1."""
    old_logp: torch.Tensor | None = None
    """float32 [B, T] pre-update log-probs (several optimizer steps per update); None: the ratio is 1."""
    teacher_hidden: torch.Tensor | None = None
    """[B, T, h_T] routed teacher's final hidden states (full-vocab reverse KL only)."""
    teacher_index: torch.Tensor | None = None
    """int64 [B] index of the routed teacher (full-vocab reverse KL only)."""
    injected: torch.Tensor | None = None
    """bool [B] rows replaced by an injected teacher trajectory (annealed injection only)."""

    @property
    def size(self) -> int:
        return self.tokens.shape[0]

    @property
    def response_lens(self) -> torch.Tensor:
        return self.response_mask.sum(1)

    @property
    def loss_mask(self) -> torch.Tensor:
        """[B, T] tokens that carry an advantage."""
        return self.response_mask & self.sample_valid[:, None]

    @property
    def dn_mask(self) -> torch.Tensor:
        """[B, T] tokens the DN statistics measure: the student's own sampled tokens with a valid score."""
        if self.injected is None:
            return self.loss_mask
        return self.loss_mask & ~self.injected[:, None]

    def select(self, rows: slice | torch.Tensor) -> TrainBatch:
        return TrainBatch(**{f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[rows]
                             for f in fields(self)})

    @classmethod
    def from_rows(cls, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                  rollout_logp: Sequence[torch.Tensor], targets: Sequence[torch.Tensor | None],
                  domain_ids: Sequence[int], advantages: Sequence[torch.Tensor] | None = None) -> TrainBatch:
        count = len(prompts)
        if count == 0:
            raise ValueError("a train batch needs at least one sample")
        longest = max(len(p) + len(r) for p, r in zip(prompts, responses, strict=True))
        longest_response = max(len(r) for r in responses)
        tokens = torch.zeros(count, longest, dtype=torch.long)
        mask = torch.zeros(count, longest_response, dtype=torch.bool)
        rollout = torch.zeros(count, longest_response)
        target = torch.zeros(count, longest_response)
        explicit = None if advantages is None else torch.zeros(count, longest_response)
        valid = torch.ones(count, dtype=torch.bool)
        for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
            length = len(response)
            tokens[i, : len(prompt) + length] = torch.tensor([*prompt, *response])
            mask[i, :length] = True
            rollout[i, :length] = rollout_logp[i]
            if targets[i] is None:
                valid[i] = False
            else:
                target[i, :length] = targets[i]
            if explicit is not None:
                explicit[i, :length] = advantages[i]
        return cls(tokens, torch.tensor([len(p) for p in prompts]), mask, rollout, target, explicit, valid,
                   torch.tensor(list(domain_ids), dtype=torch.long))

    def micro_batches(self, max_tokens: int, num_rows: int | None = None) -> list[TrainBatch]:
        """Consecutive rows in micro-batches of equal shape [m, S] with m * S <= max_tokens (at least one row);
        the last one is padded with empty rows so a pipeline sees one tensor shape."""
        per_batch = num_rows or max(1, max_tokens // self.tokens.shape[1])
        chunks = [self.select(slice(i, i + per_batch)) for i in range(0, self.size, per_batch)]
        last = chunks[-1]
        if last.size < per_batch:
            chunks[-1] = last.padded_to(per_batch)
        return chunks

    def padded_to(self, rows: int) -> TrainBatch:
        extra = rows - self.size
        padded = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                value = torch.cat([value, torch.zeros((extra, *value.shape[1:]), dtype=value.dtype,
                                                      device=value.device)])
            padded[f.name] = value
        padded["prompt_lens"][self.size:] = 1
        return TrainBatch(**padded)

    def to(self, device: torch.device | str) -> TrainBatch:
        return TrainBatch(**{f.name: None if getattr(self, f.name) is None else getattr(self, f.name).to(device)
                             for f in fields(self)})


def broadcast_batch(batch: TrainBatch | None, src: int, group) -> TrainBatch:
    """Give every rank of `group` the batch of global rank `src` (its tensors travel, not pickles of them)."""
    if not active(group):
        return batch
    names = [f.name for f in fields(TrainBatch)]
    header = None
    if dist.get_rank() == src:
        header = {n: None if getattr(batch, n) is None else (tuple(getattr(batch, n).shape), getattr(batch, n).dtype)
                  for n in names}
    header = broadcast_object(header, src, group)
    values = {}
    for name in names:
        spec = header[name]
        mine = getattr(batch, name) if dist.get_rank() == src else None
        values[name] = None if spec is None else broadcast_tensor(mine, *spec, src=src, group=group)
    return TrainBatch(**values)
