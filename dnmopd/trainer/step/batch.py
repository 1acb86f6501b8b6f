"""The padded tensors of one rank's scored samples, and their split into forward/backward micro-batches.

Legend: B responses, S = longest prompt + response, T = longest response.
Response token t of row i is `tokens[i, prompt_lens[i] + t]`; it is predicted by the hidden state at
position `prompt_lens[i] + t - 1` of that row's sequence.

Micro-batches are packed by default: their rows are concatenated into one sequence (THD) and the model never
computes a padding token. `padded_micro_batches` keeps the right-padded `[rows, longest]` form.
"""

from __future__ import annotations

import heapq
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
    topk_ids: torch.Tensor | None = None
    """int64 [B, T, k] the routed teacher's k most likely tokens at each response position, -1 where the sample
    is masked (top-k reverse KL only)."""
    topk_logp: torch.Tensor | None = None
    """float32 [B, T, k] the routed teacher's log-probs of `topk_ids` (top-k reverse KL only)."""
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

    @property
    def sequence_lens(self) -> torch.Tensor:
        """int64 [B] prompt + response tokens of each row."""
        return self.prompt_lens + self.response_lens

    def packed_micro_batches(self, max_tokens: int, *, multiple_of: int = 1) -> list[MicroBatch]:
        """Micro-batches covering every row once, each row set concatenated into one sequence of at most
        `max_tokens` tokens (a longer row alone), as few and as even as `balanced_bins` makes them. Their count is
        a multiple of `multiple_of` (the interleaved pipeline schedule needs a multiple of the stages); a
        micro-batch left without rows gets a 1-token filler row (index -1, no response tokens)."""
        bins = balanced_bins(self.sequence_lens.tolist(), max_tokens, multiple_of=multiple_of)
        micro = []
        for rows in bins:
            index = torch.tensor(rows, dtype=torch.long)
            part = self.select(index)
            if not rows:
                index, part = torch.tensor([-1]), part.with_filler(1)
            micro.append(MicroBatch(index, part.trimmed(), packed=True))
        return micro

    def padded_micro_batches(self, max_tokens: int, *, uniform: bool = False, multiple_of: int = 1
                             ) -> list[MicroBatch]:
        """Right-padded micro-batches covering every row once, each of at most `max_tokens` padded tokens (but at
        least one row).

        Rows are taken longest first, so each micro-batch is padded only to its own longest sequence. With
        `uniform` (one tensor shape for every stage-to-stage message of a pipeline) all micro-batches have the same
        rows and length, the last one padded with empty rows (index -1); `multiple_of` then pads the count of
        micro-batches to a multiple (the interleaved schedule needs a multiple of the stages).
        """
        lengths = self.sequence_lens
        order = torch.argsort(lengths, descending=True, stable=True)
        if uniform:
            rows = max(1, max_tokens // int(lengths.max()))
            count = -(-self.size // rows)
            count = -(-count // multiple_of) * multiple_of
            padded = torch.cat([order, torch.full((count * rows - self.size,), -1, dtype=torch.long)])
            full = self.padded_to(count * rows)
            full_index = torch.cat([order, torch.arange(self.size, count * rows)])
            return [MicroBatch(padded[i * rows:(i + 1) * rows], full.select(full_index[i * rows:(i + 1) * rows]),
                               packed=False) for i in range(count)]
        groups, current = [], []
        for row in order.tolist():
            longest = int(lengths[current[0]]) if current else int(lengths[row])
            if current and (len(current) + 1) * longest > max_tokens:
                groups.append(current)
                current = []
            current.append(row)
        groups.append(current)
        return [MicroBatch(torch.tensor(g), self.select(torch.tensor(g)).trimmed(), packed=False) for g in groups]

    def trimmed(self) -> TrainBatch:
        """The same rows with the sequence and response dimensions cut to what these rows use."""
        length = int(self.sequence_lens.max())
        response = max(int(self.response_lens.max()), 1)
        cut = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "tokens":
                value = value[:, :length]
            elif value is not None and value.dim() >= 2 and f.name != "tokens":
                value = value[:, :response]
            cut[f.name] = value
        return TrainBatch(**cut)

    def with_filler(self, length: int) -> TrainBatch:
        """These rows and one more: `length` prompt tokens (id 0), no response."""
        out = self.padded_to(self.size + 1)
        out.prompt_lens[-1] = length
        out.tokens = torch.nn.functional.pad(out.tokens, (0, max(0, length - out.tokens.shape[1])))
        return out

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


@dataclass
class MicroBatch:
    """Rows of a TrainBatch that go through the model together."""

    index: torch.Tensor
    """int64 [n] rows of the parent batch (-1: a filler row, which has no response tokens)."""
    batch: TrainBatch
    """Those rows, trimmed to their own longest sequence and response."""
    packed: bool
    """True: the rows' sequences are concatenated into one model input row (THD); False: right-padded rows."""

    @property
    def lengths(self) -> list[int]:
        return self.batch.sequence_lens.tolist()

    @property
    def num_tokens(self) -> int:
        """Token positions the model computes: the real tokens when packed, rows x longest when padded."""
        return sum(self.lengths) if self.packed else self.batch.tokens.numel()

    def input_ids(self) -> torch.Tensor:
        """The model input: int64 [1, sum of lengths] when packed, [n, S] when padded."""
        if not self.packed:
            return self.batch.tokens
        tokens = self.batch.tokens
        real = torch.arange(tokens.shape[1]) < self.batch.sequence_lens[:, None]
        return tokens[real][None]  # row-major: the sequences back to back

    def locate(self, rows: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(input row, input position) of position `positions` of the micro-batch rows `rows`."""
        if not self.packed:
            return rows, positions
        lengths = self.batch.sequence_lens.to(rows.device)
        return torch.zeros_like(rows), (lengths.cumsum(0) - lengths)[rows] + positions


def balanced_bins(lengths: Sequence[int], capacity: int, *, multiple_of: int = 1) -> list[list[int]]:
    """Indices of `lengths` in bins of at most `capacity` (an item longer than that alone in its bin), with loads
    as even as possible and a bin count that is a multiple of `multiple_of`.

    Starting from the fewest bins that could hold the total, longest first, each item goes to the least-loaded bin
    (longest-processing-time-first); when it does not fit there, the bin count grows by one and the packing
    starts over. Bins without items are possible only when
    `multiple_of` asks for more bins than there are items.
    """
    if capacity < 1 or multiple_of < 1:
        raise ValueError(f"balanced_bins needs capacity >= 1 and multiple_of >= 1, got {capacity}, {multiple_of}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    fitting = [n for n in lengths if n <= capacity]
    count = max(1, len(lengths) - len(fitting) + -(-sum(fitting) // capacity))  # longer items alone
    while True:
        count = -(-count // multiple_of) * multiple_of
        heap = [(0, b) for b in range(count)]  # (load, bin): the least-loaded bin first
        bins: list[list[int]] = [[] for _ in range(count)]
        for i in order:
            load, b = heapq.heappop(heap)
            if load and load + lengths[i] > capacity:
                break
            bins[b].append(i)
            heapq.heappush(heap, (load + lengths[i], b))
        else:
            return [sorted(items) for items in bins]
        count += 1


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
