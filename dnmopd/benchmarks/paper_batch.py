"""The paper's student batch for the benchmarks: its length mix and the random students timed on it.

The mix (reference-behavior 9.2: the 4B student's first batch): prompts in equal thirds math / code / IF, each with
its responses; response lengths drawn per domain from a gamma distribution whose mean after capping at the cap is the
domain's mean (math 4,600, code 5,200, IF 111 tokens), then capped; prompt lengths from a gamma of shape 2 and a given
mean, capped at 1,228 (the longest prompt of the paper's data). Used by launch/bench_student.py (padded vs packed)
and launch/gpu_check.py (the update's throughput).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

DOMAIN_MEANS = {"math": 4600, "code": 5200, "ifeval": 111}  # reference-behavior 9.2, 4B at update 0
LONGEST_PROMPT = 1228  # reference-behavior 4.1: the longest prompt of the paper's data
RESPONSE_CAP = 8192  # the paper's 8K
GAMMA_SHAPE = 2.0
"""Shape of the response-length gamma: 2 puts about a sixth of math and a quarter of code responses at an 8K cap."""
PROMPT_MEAN = 300.0
"""Mean prompt length in tokens."""
QWEN35_VOCAB = 248_320
PRESETS = {  # random Qwen3.5 students by name: build_tiny_hf_checkpoint overrides
    "tiny": {},
    # the real Qwen3.5-2B layer shapes (random weights); a given number of layers of them
    "qwen3.5-2b": {"hidden_size": 2048, "intermediate_size": 6144, "num_attention_heads": 8,
                   "num_key_value_heads": 2, "head_dim": 256, "linear_num_key_heads": 16,
                   "linear_num_value_heads": 16, "linear_key_head_dim": 128, "linear_value_head_dim": 128},
}


def capped_gamma_mean(shape: float, scale: float, cap: float) -> float:
    """E[min(X, cap)] for X ~ Gamma(shape, scale): shape*scale*P(shape+1, cap/scale) + cap*(1 - P(shape, cap/scale))."""
    k, x = torch.tensor(shape, dtype=torch.float64), torch.tensor(cap / scale, dtype=torch.float64)
    return float(shape * scale * torch.special.gammainc(k + 1, x) + cap * (1 - torch.special.gammainc(k, x)))


def gamma_scale_for_capped_mean(mean: float, shape: float, cap: float) -> float:
    """The scale whose capped gamma has `mean` (bisection in log space; the capped mean grows with the scale)."""
    if not 0 < mean < cap:
        raise ValueError(f"a capped mean must lie in (0, cap={cap}), got {mean}")
    low, high = 1e-9 * mean, 1e6 * mean
    for _ in range(200):
        middle = (low * high) ** 0.5
        low, high = (middle, high) if capped_gamma_mean(shape, middle, cap) < mean else (low, middle)
    return (low * high) ** 0.5


@dataclass
class LengthMix:
    domains: list[str]
    prompt_lens: list[int]
    response_lens: list[int]
    cap: int

    @classmethod
    def draw(cls, prompts: int, samples: int, *, cap: int = RESPONSE_CAP, gamma_shape: float = GAMMA_SHAPE,
             prompt_mean: float = PROMPT_MEAN, seed: int = 0, scale: float = 1.0) -> LengthMix:
        """The paper's mix (module docstring) of `prompts` prompts x `samples` responses, every length then
        multiplied by `scale` (at least 1)."""
        scaled_cap = max(1, round(cap * scale))
        names = list(DOMAIN_MEANS)
        domains, prompt_lens, response_lens = [], [], []
        prompt_scale = gamma_scale_for_capped_mean(prompt_mean, 2.0, LONGEST_PROMPT)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            for i in range(prompts):
                domain = names[i * len(names) // prompts]
                prompt = _draw_gamma(2.0, prompt_scale, LONGEST_PROMPT, 1)[0]
                response_scale = gamma_scale_for_capped_mean(DOMAIN_MEANS[domain], gamma_shape, cap)
                domains += [domain] * samples
                prompt_lens += [max(1, round(prompt * scale))] * samples
                response_lens += [max(1, min(scaled_cap, round(n * scale)))
                                  for n in _draw_gamma(gamma_shape, response_scale, cap, samples)]
        return cls(domains, prompt_lens, response_lens, scaled_cap)

    def summary(self) -> dict:
        out = {}
        for domain in DOMAIN_MEANS:
            lengths = [n for d, n in zip(self.domains, self.response_lens, strict=True) if d == domain]
            out[domain] = {"responses": len(lengths), "mean_response": statistics.fmean(lengths),
                           "cap_rate": sum(n >= self.cap for n in lengths) / len(lengths),
                           "token_share": sum(lengths) / sum(self.response_lens)}
        out["response_tokens"] = sum(self.response_lens)
        out["real_tokens"] = sum(self.prompt_lens) + sum(self.response_lens)
        return out

    def train_batch(self, vocab_size: int, seed: int):
        from dnmopd.trainer.step.batch import TrainBatch

        gen = torch.Generator().manual_seed(seed)
        prompts = [torch.randint(0, vocab_size, (n,), generator=gen).tolist() for n in self.prompt_lens]
        responses = [torch.randint(0, vocab_size, (n,), generator=gen).tolist() for n in self.response_lens]
        zeros = [torch.zeros(n) for n in self.response_lens]
        domain_ids = [list(DOMAIN_MEANS).index(d) for d in self.domains]
        return TrainBatch.from_rows(prompts, responses, zeros, zeros, domain_ids)


def _draw_gamma(shape: float, scale: float, cap: float, count: int) -> list[int]:
    rate = torch.tensor(1 / scale, dtype=torch.float64)
    lengths = torch.distributions.Gamma(torch.tensor(shape, dtype=torch.float64), rate).sample((count,))
    return lengths.round().clamp(max=cap).long().tolist()
