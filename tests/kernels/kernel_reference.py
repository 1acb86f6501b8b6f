"""Float64 references for the fused kernels (full logits, written independently of the kernels) and the
tolerances the tests hold them to.

Every op runs on both backends (``dnmopd.kernels.utils.kernel_backend``), ``native`` (plain torch) and
``triton`` (compiled on CUDA, the interpreter on CPU), on the same inputs. Tolerances, as
``||x - ref|| / ||ref||`` unless a test says otherwise:

- float32 inputs, either backend against float64: ``FLOAT64_TOL`` = 1e-5 (float32 logits, float32
  accumulation; measured up to about 1e-6).
- float32 inputs, native against Triton: ``BACKEND_TOL`` = 2e-6 (the two sum in different orders;
  measured up to 7e-7 on gradients, 1.5e-7 on values).
- bf16 inputs, native against Triton: ``BACKEND_TOL_BF16`` = 1e-2 on the bf16 gradients (measured up to
  5.3e-3: the Triton interpreter casts float32 to bf16 by truncation where torch rounds to nearest, so
  dL/dlogits differ by up to one bf16 ulp) and ``BACKEND_TOL`` on the float32 outputs; against float64
  both are within 2e-2 (bf16 logits).
- domain_stats (float64 sums): 1e-12.
"""

from __future__ import annotations

import torch

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
BACKENDS = ("native", "triton")
FLOAT64_TOL = 1e-5
BACKEND_TOL = 2e-6
BACKEND_TOL_BF16 = 1e-2


def leaf64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.float64).requires_grad_()


def logprob_entropy(hidden, weight, targets, temperature=1.0):
    """(logp [N], entropy [N]) in float64 from materialised logits."""
    logits = (hidden.to(torch.float64) @ weight.to(torch.float64).t()) / temperature
    log_p = torch.log_softmax(logits, dim=-1)
    logp = log_p.gather(1, targets[:, None].long().clamp(0, logits.shape[1] - 1))[:, 0]  # masked: any id
    entropy = -(log_p.exp() * log_p).sum(-1)
    return logp, entropy


def response_mean(per_token, response_ids, mask, num_local, num_responses=None):
    """sum_r (1/num_responses) * mean over the valid tokens of response r (empty responses add 0)."""
    mask = mask.to(torch.bool)
    total = per_token.new_zeros(())
    for r in range(num_local):
        sel = mask & (response_ids == r)
        if sel.any():
            total = total + per_token[sel].sum() / sel.sum()
    return total / (num_local if num_responses is None else num_responses)


def opd_loss(logp, response_ids, response_weights, mask, *, teacher_logp=None, advantages=None, old_logp=None,
             num_responses=None, eps_low=0.2, eps_high=0.2, dual_clip=None):
    """Clipped OPD loss (reference-behavior 1.6) on float64 log-probs; masked positions never enter."""
    mask = mask.to(torch.bool)
    old = logp.detach() if old_logp is None else old_logp.to(torch.float64)
    raw = advantages.to(torch.float64) if advantages is not None else teacher_logp.to(torch.float64) - old
    w = response_weights.to(torch.float64)[response_ids.clamp(0, len(response_weights) - 1)]
    adv = torch.where(mask, w * torch.where(mask, raw, 0.0), 0.0)
    ratio = torch.exp(torch.where(mask, logp - old, 0.0))
    pg = torch.maximum(-ratio * adv, -torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv)
    if dual_clip is not None:
        pg = torch.where(adv < 0, torch.minimum(pg, -dual_clip * adv), pg)
    return response_mean(pg, response_ids, mask, len(response_weights), num_responses)


def reverse_kl(hidden, weight, teacher_logits, temperature=1.0):
    """Per-token KL(student || teacher) in float64."""
    s = torch.log_softmax((hidden.to(torch.float64) @ weight.to(torch.float64).t()) / temperature, -1)
    t = torch.log_softmax(teacher_logits.to(torch.float64) / temperature, -1)
    return (s.exp() * (s - t)).sum(-1)


def domain_stats(log_ratio, mask, domain_ids, num_domains):
    out = torch.zeros(4, num_domains, dtype=torch.float64)
    for b in range(log_ratio.shape[0]):
        valid = mask[b].to(torch.bool).cpu()
        x = log_ratio[b].cpu().to(torch.float64)[valid]
        d = int(domain_ids[b])
        out[:, d] += torch.stack([torch.tensor(1.0, dtype=torch.float64), valid.sum().to(torch.float64),
                                  x.sum(), (x * x).sum()])
    return out


def rel_err(value, ref) -> float:
    ref = ref.detach().to(torch.float64).cpu()
    return float((value.detach().to(torch.float64).cpu() - ref).norm() / ref.norm().clamp(min=1e-300))


def random_head(n, d, v, *, seed, dtype=torch.float32, logit_std=3.0, offset=0.0):
    """Random hidden/weight (leaf tensors on DEVICE) with logits of std ``logit_std`` plus ``offset``."""
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=gen)
    weight = torch.randn(v, d, generator=gen) * (logit_std / d**0.5)
    if offset:
        hidden[:, 0] = 1.0
        weight[:, 0] = offset
    put = lambda t: t.to(device=DEVICE, dtype=dtype).requires_grad_()  # noqa: E731
    return put(hidden), put(weight)


def topk_reverse_kl(hidden, weight, candidates, teacher_logp, temperature=1.0, tail_floor=1e-10):
    """Per-token KL(student || teacher) in float64 between the two distributions coarsened to the buckets {v} for
    each candidate v (-1: an empty slot) and the rest of the vocabulary; the teacher is known only on the
    candidates (its tail is 1 - their mass, at least ``tail_floor``), the student's tail is summed over the
    columns outside the candidates."""
    log_p = torch.log_softmax((hidden.to(torch.float64) @ weight.to(torch.float64).t()) / temperature, -1)
    out = []
    for t in range(log_p.shape[0]):
        ids = candidates[t][candidates[t] >= 0].long().cpu()
        lq = teacher_logp[t][candidates[t] >= 0].to(torch.float64).cpu()
        outside = torch.ones(log_p.shape[1], dtype=torch.bool)
        outside[ids] = False
        lp = log_p[t, ids.to(log_p.device)]
        kl = (lp.exp() * (lp - lq.to(lp.device))).sum()
        tail_p = log_p[t][outside.to(log_p.device)].exp().sum()
        tail_q = max(1.0 - float(lq.exp().sum()), tail_floor)
        if tail_p > 0:
            kl = kl + tail_p * (torch.log(tail_p) - torch.log(torch.tensor(tail_q, dtype=torch.float64)))
        out.append(kl)
    return torch.stack(out)
