"""Deterministic, resumable prompt sampler: rollout batches of P prompts, sharded over data-parallel ranks.

The prompts form one endless stream: epoch 0's order, then epoch 1's, ... where epoch ``e`` is a shuffle
of ``range(num_prompts)`` seeded by ``(seed, e)`` (or the identity with ``shuffle=False``). Rollout ``k``
takes stream positions ``[k*P, (k+1)*P)``, so every prompt is used once per epoch and a batch may run across
an epoch boundary; nothing is dropped. Data-parallel rank ``r`` of ``D`` takes the ``r``-th contiguous block
of ``P / D`` prompts of each batch: ranks never overlap and together cover the batch.

The state is the stream position (``state_dict``), which does not depend on the rank layout: a run may be
resumed mid-epoch, on a different number of data-parallel ranks, and continues with exactly the prompts the
uninterrupted run would have used.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

STATE_VERSION = 1


@dataclass(frozen=True, slots=True)
class RolloutBatch:
    step: int
    """Rollout number (0-based)."""
    epochs: tuple[int, ...]
    """Epoch(s) the batch's prompts come from (two when it crosses an epoch boundary)."""
    indices: list[int]
    """This rank's prompt indices (rows of the prompt set)."""
    global_indices: list[int]
    """The whole batch, all ranks, in rank order."""


class PromptSampler:
    """Yields ``RolloutBatch``es forever (``next_batch`` / iteration)."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        prompts_per_rollout: int = 64
        """P: prompts per rollout batch, over all data-parallel ranks (the paper uses 64)."""
        seed: int = 42
        """Seed of the per-epoch shuffles."""
        shuffle: bool = True
        """Shuffle each epoch (False: dataset order, for debugging)."""

        def __post_init__(self) -> None:
            if self.prompts_per_rollout < 1:
                raise ValueError(f"PromptSampler.Config.prompts_per_rollout must be >= 1, "
                                 f"got {self.prompts_per_rollout}")

        def build(self, *, num_prompts: int, dp_rank: int = 0, dp_size: int = 1) -> PromptSampler:
            return PromptSampler(self, num_prompts=num_prompts, dp_rank=dp_rank, dp_size=dp_size)

    def __init__(self, config: PromptSampler.Config, *, num_prompts: int, dp_rank: int = 0, dp_size: int = 1):
        if num_prompts < 1:
            raise ValueError(f"the prompt set is empty (num_prompts={num_prompts})")
        if not 0 <= dp_rank < dp_size:
            raise ValueError(f"dp_rank {dp_rank} is outside [0, dp_size={dp_size})")
        if config.prompts_per_rollout % dp_size:
            raise ValueError(f"prompts_per_rollout ({config.prompts_per_rollout}) must be a multiple of the "
                             f"data-parallel size ({dp_size}); change one of them")
        self.config = config
        self.num_prompts = num_prompts
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self.consumed = 0
        """Stream position: prompts handed out so far (all ranks)."""
        self.step = 0
        self._orders: dict[int, list[int]] = {}

    def epoch_order(self, epoch: int) -> list[int]:
        """The prompt order of one epoch."""
        if epoch not in self._orders:
            order = list(range(self.num_prompts))
            if self.config.shuffle:
                random.Random(f"dnmopd-sampler/{self.config.seed}/{epoch}").shuffle(order)
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            self._orders[epoch] = order
        return self._orders[epoch]

    @property
    def epoch(self) -> int:
        """The epoch of the next prompt."""
        return self.consumed // self.num_prompts

    def next_batch(self) -> RolloutBatch:
        size = self.config.prompts_per_rollout
        positions = range(self.consumed, self.consumed + size)
        batch = [self.epoch_order(p // self.num_prompts)[p % self.num_prompts] for p in positions]
        epochs = tuple(sorted({p // self.num_prompts for p in positions}))
        per_rank = size // self.dp_size
        local = batch[self.dp_rank * per_rank:(self.dp_rank + 1) * per_rank]
        result = RolloutBatch(step=self.step, epochs=epochs, indices=local, global_indices=batch)
        self.consumed += size
        self.step += 1
        return result

    def __iter__(self) -> Iterator[RolloutBatch]:
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict:
        """JSON-serialisable position (independent of the data-parallel layout)."""
        return {"version": STATE_VERSION, "consumed": self.consumed, "step": self.step,
                "num_prompts": self.num_prompts, "seed": self.config.seed, "shuffle": self.config.shuffle}

    def load_state_dict(self, state: dict) -> None:
        """Resume from ``state_dict()``; refuses a state made for another prompt set, seed or order."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"sampler state version {state.get('version')!r} is not {STATE_VERSION}")
        for key, ours in (("num_prompts", self.num_prompts), ("seed", self.config.seed),
                          ("shuffle", self.config.shuffle)):
            if state.get(key) != ours:
                raise ValueError(f"sampler state was saved with {key}={state.get(key)!r}, this run has {ours!r}; "
                                 f"resume with the same prompt set and sampler settings")
        for key in ("consumed", "step"):
            if not isinstance(state.get(key), int) or state[key] < 0:
                raise ValueError(f"sampler state field {key!r} must be a non-negative integer")
        self.consumed, self.step = state["consumed"], state["step"]
