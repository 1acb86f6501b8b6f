"""In-process rollout: sampling with a transformers model inside the trainer (the embedded default).

Prompts are left-padded into micro-batches of `max_batch_size` and decoded with the model's KV cache. Each
sample draws from its own `torch.Generator` seeded with `seed + sample_id`, so a seeded response does not
depend on which other prompts share its batch. Log-probs are those of the distribution sampled from
(`rollout.base`). Weights are updated in memory from HF-named full tensors (the student's HF mapping) and
probed with `dnmopd.hf.inprocess.score_responses`, the in-process teacher's scoring.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from dnmopd.hf.inprocess import InProcessModel, score_responses
from dnmopd.hf.models import model_vocab_size
from dnmopd.rollout.base import Rollout, RolloutEngine, RolloutRequest, SamplingParams, WeightProbe
from dnmopd.rollout.sampling import draw, sampling_logprobs
from dnmopd.serving.token_ids import validate_token_ids


def eos_token_ids(model: torch.nn.Module) -> tuple[int, ...]:
    """EOS ids from the generation config (falling back to the model config); a list or an int."""
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None)
        if eos is not None:
            return tuple(eos) if isinstance(eos, list | tuple) else (int(eos),)
    return ()


class InProcessRollout(RolloutEngine):
    causal_lm_weight_names: ClassVar[bool] = True

    @dataclass(kw_only=True, slots=True)
    class Config(InProcessModel):
        max_batch_size: int = 64
        """Prompts decoded together."""

        def __post_init__(self):
            InProcessModel.__post_init__(self)  # explicit: zero-argument super() fails in slots dataclasses
            if self.max_batch_size < 1:
                raise ValueError(f"InProcessRollout.Config.max_batch_size={self.max_batch_size}: must be >= 1")

        def build(self) -> InProcessRollout:
            return InProcessRollout(self)

    def __init__(self, config: Config, model: torch.nn.Module | None = None):
        self.config = config
        self.model = model if model is not None else config.load()
        self.vocab_size = model_vocab_size(self.model)
        self.eos_ids = eos_token_ids(self.model)
        # transformers renamed `past_key_values` to `cache` (5.2x); pass the cache under the name this one takes
        forward_args = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in forward_args else "past_key_values"

    # -- generation ----------------------------------------------------------------------------------------

    async def generate(self, request: RolloutRequest, params: SamplingParams) -> Rollout:
        return (await asyncio.to_thread(self._generate_group, [request], params))[0]

    async def stream(self, requests: Sequence[RolloutRequest], params: SamplingParams) -> AsyncIterator[Rollout]:
        """Micro-batches run one after the other; each one's rollouts are yielded as soon as it is done."""
        size = self.config.max_batch_size
        for start in range(0, len(requests), size):
            for rollout in await asyncio.to_thread(self._generate_group, requests[start : start + size], params):
                yield rollout

    @torch.no_grad()
    def _generate_group(self, requests: Sequence[RolloutRequest], params: SamplingParams) -> list[Rollout]:
        for request in requests:
            validate_token_ids(request.prompt_ids, self.vocab_size, what=f"rollout prompt {request.sample_id}")
        device = self.model.get_output_embeddings().weight.device
        longest = max(len(r.prompt_ids) for r in requests)
        input_ids = torch.zeros(len(requests), longest, dtype=torch.long)
        mask = torch.zeros(len(requests), longest, dtype=torch.long)
        for row, request in enumerate(requests):  # left padding: every prompt ends at the last column
            input_ids[row, longest - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids)
            mask[row, longest - len(request.prompt_ids) :] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        generators = [self._generator(params.sample_seed(r.sample_id), device) for r in requests]
        stops = torch.tensor(sorted(set(self.eos_ids) | set(params.stop_token_ids)), dtype=torch.long, device=device)

        from transformers import DynamicCache  # here: a config naming this backend loads without transformers

        cache = {self._cache_arg: DynamicCache(config=self.model.config)}  # mutated in place by each forward
        output = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                            logits_to_keep=1, **cache)
        tokens, logprobs = [], []
        finished = torch.zeros(len(requests), dtype=torch.bool, device=device)
        stopped = torch.zeros_like(finished)
        for _ in range(params.max_new_tokens):
            logq = sampling_logprobs(output.logits[:, -1], params)
            token = draw(logq, params, generators)
            tokens.append(token)
            logprobs.append(logq.gather(1, token[:, None]).squeeze(1))
            hit = torch.isin(token, stops) & ~finished
            stopped |= hit
            finished |= hit
            if bool(finished.all()):
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            positions = positions[:, -1:] + 1
            output = self.model(input_ids=token[:, None], attention_mask=mask, position_ids=positions,
                                use_cache=True, **cache)
        return self._collect(requests, torch.stack(tokens, 1), torch.stack(logprobs, 1), stops, stopped)

    @staticmethod
    def _collect(requests, tokens, logprobs, stops, stopped) -> list[Rollout]:
        rollouts = []
        stop_ids = set(stops.tolist())
        for row, request in enumerate(requests):
            ids = tokens[row].tolist()
            length = len(ids)
            if bool(stopped[row]):  # cut after the first stop token, which stays in the response
                length = next(i for i, t in enumerate(ids) if t in stop_ids) + 1
            rollouts.append(Rollout(
                sample_id=request.sample_id, prompt_ids=list(request.prompt_ids), response_ids=ids[:length],
                logprobs=logprobs[row, :length].float().cpu(),
                finish_reason="stop" if bool(stopped[row]) else "length",
            ))
        return rollouts

    @staticmethod
    def _generator(seed: int | None, device: torch.device) -> torch.Generator | None:
        if seed is None:
            return None
        return torch.Generator(device=device).manual_seed(seed)

    # -- weights -------------------------------------------------------------------------------------------

    @torch.no_grad()
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], probe: WeightProbe) -> None:
        """Copy HF-named full tensors into the model (tied names accepted), then verify with `probe`."""
        parameters = dict(self.model.named_parameters(remove_duplicate=False))
        updated: set[int] = set()
        for name, tensor in named_tensors:
            if name not in parameters:
                raise KeyError(f"update_weights: {name!r} is not a parameter of the rollout model")
            target = parameters[name]
            if tuple(tensor.shape) != tuple(target.shape):
                raise ValueError(
                    f"update_weights: {name} has shape {tuple(tensor.shape)}, model has {tuple(target.shape)}"
                )
            target.copy_(tensor.to(device=target.device, dtype=target.dtype))
            updated.add(id(target))
        missing = [n for n, p in self.model.named_parameters() if id(p) not in updated]
        if missing:
            raise ValueError(f"update_weights: no tensor given for {missing}")
        validate_token_ids(probe.token_ids, self.vocab_size, what="weight probe")
        served = score_responses(self.model, [(probe.token_ids, probe.prompt_len)])[0].logprobs
        probe.verify(served, source="in-process rollout")
