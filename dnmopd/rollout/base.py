"""The `RolloutEngine` interface: prompt token ids + sampling parameters -> responses with log-probs.

Which log-prob a rollout reports (`Rollout.logprobs`). The DN statistic r_t = log p_teacher(y_t) -
log q(y_t) compares the teacher with the distribution the response token was actually drawn from, so

    logprobs[t] = log q_t(y_t),  q_t = renormalize(top_p(top_k(softmax(z_t / T))))

with z_t the student's raw logits at step t, T the temperature, top-k applied first and then top-p (the
smallest set of most likely tokens whose mass reaches top_p), both renormalized. With T = 1, top_k off and
top_p = 1 this is the model's own log p(y_t | h_t). For greedy decoding (T = 0) nothing is sampled and the
raw log_softmax(z_t) is reported. What the servers return and how each backend gets q:

- inprocess: computes q itself (it samples from it).
- vllm: reports raw log_softmax(z) by default; with `--logprobs-mode processed_logprobs` (set by our
  launcher) it reports exactly log q. A raw-mode server is accepted only when q equals the raw distribution.
- sglang: reports log_softmax(z / T) before top-k/top-p. With top_k on, the engine also asks for the top-k
  log-probs and subtracts their logsumexp (the kept mass); top_p < 1 cannot be converted and is refused.

The stop or EOS token that ended a response is part of `response_ids` (and has a log-prob), as on both
servers. `update_weights` takes Hugging Face-named full tensors and must be followed by a `WeightProbe`
check: the engine scores a probe sequence after the update and fails loudly unless the served log-probs
equal the expected log-probs of the new weights.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dnmopd.serving.blocking import BlockingClient, run_blocking

FINISH_REASONS = ("stop", "length")


class RolloutError(RuntimeError):
    """A rollout engine failed a check or cannot produce what was asked."""


class WeightUpdateError(RolloutError):
    """A weight update failed, or the probe after it showed that the served model is not the new one."""


MIN_TEMPERATURE = 1e-5
"""The smallest sampling temperature: SGLang treats any below 1e-6 as greedy (and vLLM below 1e-5)."""


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 turns it off."""
    top_k: int = -1
    """Sample among the k most likely tokens; -1 turns it off."""
    max_new_tokens: int = 1024
    """Most tokens generated per response (the stop token included)."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra ids that end a response (EOS always does); the matched id is kept in the response."""
    seed: int | None = None
    """Base seed: sample i uses seed + i (independent of batching). None: unseeded."""

    def __post_init__(self):
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        if self.temperature < 0 or 0 < self.temperature < MIN_TEMPERATURE:
            raise ValueError(f"SamplingParams.temperature={self.temperature}: must be 0 (greedy) or >= "
                             f"{MIN_TEMPERATURE} (servers decode greedily below it while reporting raw log-probs)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p={self.top_p}: must be in (0, 1]")
        if self.top_k != -1 and self.top_k < 1:
            raise ValueError(f"SamplingParams.top_k={self.top_k}: use -1 (off) or a value >= 1")
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens={self.max_new_tokens}: must be >= 1")

    def request_fields(self, seed: int | None, *, max_tokens: str, seed_field: str) -> dict[str, Any]:
        """These options as an inference server's request fields, under its names for the token cap and the seed;
        top_k, stop ids and the seed only when set."""
        fields: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p,
                                  max_tokens: self.max_new_tokens}
        if self.top_k != -1:
            fields["top_k"] = self.top_k
        if self.stop_token_ids:
            fields["stop_token_ids"] = list(self.stop_token_ids)
        if seed is not None:
            fields[seed_field] = seed
        return fields

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def reports_raw_distribution(self) -> bool:
        """True when q (see module doc) is the model's raw distribution: greedy, or T=1 untruncated."""
        return self.greedy or (self.temperature == 1 and self.top_k == -1 and self.top_p == 1)

    def sample_seed(self, sample_id: int) -> int | None:
        return None if self.seed is None else self.seed + sample_id


@dataclass(frozen=True, slots=True)
class RolloutRequest:
    prompt_ids: tuple[int, ...]
    sample_id: int
    """Position of the sample in the batch; also offsets the seed."""

    def __post_init__(self):
        object.__setattr__(self, "prompt_ids", tuple(int(t) for t in self.prompt_ids))
        if not self.prompt_ids:
            raise ValueError(f"RolloutRequest {self.sample_id}: empty prompt")


@dataclass(slots=True)
class Rollout:
    sample_id: int
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: torch.Tensor
    """float32 [len(response_ids)]: log q(y_t) of the distribution actually sampled (module doc)."""
    finish_reason: str
    """`stop` (EOS or a stop id, which is the last response token) or `length`."""


@dataclass(frozen=True, slots=True)
class WeightProbe:
    """A sequence whose response log-probs under the NEW weights are known (e.g. from the trainer's model)."""

    token_ids: tuple[int, ...]
    prompt_len: int
    expected: torch.Tensor
    """float [len(token_ids) - prompt_len]: log p_new(response token | prefix) at T = 1."""
    tolerance: float = 2e-2
    """Largest allowed mean |served - expected| (bf16 serving differs by ~1e-2; a stale model by ~1)."""

    def verify(self, served: torch.Tensor, *, source: str) -> None:
        expected = self.expected.double().flatten()
        if served.shape != expected.shape:
            raise WeightUpdateError(f"{source}: probe returned {tuple(served.shape)} values, expected {expected.shape}")
        error = (served.double() - expected).abs().mean().item()
        if not error <= self.tolerance:
            raise WeightUpdateError(
                f"{source}: after the weight update the served log-probs differ from the new weights' by "
                f"{error:.3g} on average (tolerance {self.tolerance:g}): the server is not serving the new weights"
            )


class RolloutEngine(BlockingClient, ABC):
    """Generates responses for the student. Built from its backend's `Config.build()`.

    What the trainer must know of a backend before it has an engine (off the model-parallel leaders it has
    none) is declared on the class (`shared_across_ranks`, `causal_lm_weight_names`, `distributed_sync`)."""

    shared_across_ranks: ClassVar[bool] = False
    """One engine (a set of servers) serves every data-parallel rank, so one rank updates its weights for all;
    False: each model-parallel leader has an engine of its own."""
    distributed_sync: ClassVar[bool] = False
    """The backend can take updates broadcast over a process group (`rollout.sync: distributed`)."""
    causal_lm_weight_names: ClassVar[bool] = False
    """`update_weights` takes the parameter names of transformers' AutoModelForCausalLM (`model.*`); False: the
    checkpoint's names (`model.language_model.*` for the VL layout), as the served folder has them."""
    vocab_size: int

    @abstractmethod
    async def generate(self, request: RolloutRequest, params: SamplingParams) -> Rollout:
        """One response for one prompt."""

    async def stream(self, requests: Sequence[RolloutRequest], params: SamplingParams) -> AsyncIterator[Rollout]:
        """Yield rollouts in the order they finish (scoring can start on each at once)."""
        tasks = [asyncio.create_task(self.generate(r, params)) for r in requests]
        try:
            for finished in asyncio.as_completed(tasks):
                yield await finished
        finally:
            for task in tasks:
                task.cancel()

    def generate_batch(self, requests: Sequence[RolloutRequest], params: SamplingParams) -> list[Rollout]:
        """Blocking: all rollouts, in request order."""

        async def collect() -> list[Rollout]:
            return [r async for r in self.stream(requests, params)]

        return sorted(run_blocking(collect()), key=lambda r: r.sample_id)

    @abstractmethod
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], probe: WeightProbe) -> None:
        """Serve new weights (HF names, full tensors), then verify them with `probe` or raise."""

    def check(self) -> None:
        """Startup checks (servers up and serving the expected model). Raises `RolloutError` when one fails."""
        return None
