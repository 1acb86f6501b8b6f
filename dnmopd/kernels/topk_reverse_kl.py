"""Reverse KL(student || teacher) per token over K candidate tokens and one tail bucket, fused with the LM head.

A teacher that is a server returns its distribution only on a few tokens per position: its top-k (or the
log-probs of ids it was asked about). Per token t, with candidates S_t (K distinct ids; an id of -1 is an
empty slot), the student's scaled logits s = (h_t W^T) / tau over the whole vocabulary (all TP shards) and
p = softmax(s), the vocabulary is split into the buckets {v} for v in S_t and the tail T_t = V \\ S_t:

    P_v = p_v,  P_T = 1 - sum_{v in S} p_v        Q_v = q_v (given),  Q_T = max(1 - sum_{v in S} q_v, TAIL_FLOOR)
    KL_t = sum_{v in S} P_v (log P_v - log Q_v) + P_T (log P_T - log Q_T)          (0 log 0 = 0)

the exact KL between the two distributions coarsened to those buckets: never above the full-vocabulary KL,
equal to it when S_t is the whole vocabulary. The loss has the OPD loss's weights and reduction:

    L = sum_r (w_r / num_responses) * (1 / max(n_r, 1)) * sum_{t in r, valid} KL_t

Gradient for the student only (the teacher's values are constants): with g_B = log P_B - log Q_B for the
bucket B(v) holding v,

    dKL_t/dz_v = p_v (g_{B(v)} - KL_t) / tau

(every row sums to zero). So dL/dz is the tail's row, c p_v (g_T - KL_t), on every column, with the K
candidate columns overwritten by c p_v (g_v - KL_t). Per token chunk: the logits GEMM; the student's row
max / sum-exp from ``linear_logprob``'s stats pass (its Triton kernel, or the native twin) and the K
candidate logits gathered on this rank's shard; one all-gather of the packed (max, sum-exp, K logits, K
ownership flags) per token over the TP group; the per-token math in float64 on the merged values;
``linear_logprob``'s gradient pass writes the tail's row, the K candidate columns are scattered over it; two
GEMMs give grad_hidden (this rank's partial sum over its vocab shard, reduced once by the caller's TP
mapping) and grad_weight.

The tail mass comes from 1 - sum_S p, so a tail below about 1e-7 of the row (float32 logits) is rounding:
its term is then negligible, and a tail computed as 0 contributes 0. The teacher's tail is floored at
TAIL_FLOOR, so a student tail against a teacher whose candidates hold all its mass (rounding can push their
sum to 1) costs P_T log(P_T / TAIL_FLOOR) instead of infinity.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .linear_logprob import logprob_partials, write_logprob_grad
from .utils import (
    ChunkedHead,
    check_lm_head_inputs,
    gather_token_stats,
    merge_max_sumexp,
    response_token_weights,
    scale_saved_grads,
    use_triton,
)

TAIL_FLOOR = 1e-10
"""Smallest teacher tail mass Q_T: a student tail against a fully covered teacher row stays finite."""
LOGPROB_SLACK = 1e-4
"""How far above 0 a given teacher log-prob may lie (float32 rounding); larger values are refused."""


class TopKReverseKLOutput(NamedTuple):
    loss: torch.Tensor  # 0-dim float32, differentiable w.r.t. the student's hidden and weight
    kl: torch.Tensor  # [N] float32 per-token bucketed KL(student || teacher) (detached)
    student_mass: torch.Tensor  # [N] float32 the student's probability on the candidates, sum_S p (detached)


def _candidate_stats(logits, candidates, vocab_start, inv_temp, tp_group, triton_path):
    """Merged (lse [C] float32, candidate logits [C, K], owners [C, K]) of one chunk; one all-gather."""
    n_cols = logits.shape[1]
    local = candidates - vocab_start
    mine = (candidates >= 0) & (local >= 0) & (local < n_cols)
    picked = logits.gather(1, local.clamp(0, n_cols - 1)).to(torch.float32) * inv_temp
    any_target = candidates[:, 0].clamp(min=0).contiguous()  # the pass's target entries are not used here
    stats = logprob_partials(logits, any_target, vocab_start, 1.0 / inv_temp, False, None, triton_path)[0]
    k = candidates.shape[1]
    gathered = gather_token_stats(torch.cat([stats[:, :2], torch.where(mine, picked, 0.0), mine.float()], 1),
                                  tp_group)
    m, sum_exp, _ = merge_max_sumexp(gathered[..., 0], gathered[..., 1])
    return m + torch.log(sum_exp), gathered[..., 2: 2 + k].sum(0), gathered[..., 2 + k:].sum(0)


def bucket_kl(student_logp: torch.Tensor, teacher_logp: torch.Tensor, valid: torch.Tensor):
    """Per-token bucketed KL and its parts from the candidates' log-probs, all float64 [C, K] -> (kl [C],
    g [C, K] = log P_v - log Q_v, g_tail [C] (0 where the tail is empty), student mass [C])."""
    neg_inf = torch.tensor(-torch.inf, dtype=torch.float64, device=student_logp.device)
    lp = torch.where(valid, student_logp.clamp(max=0.0), neg_inf)
    lq = torch.where(valid, teacher_logp.clamp(max=0.0), neg_inf)
    mass = lp.logsumexp(dim=1)
    tail_p = (-torch.expm1(mass)).clamp(min=0.0)
    tail_q = (-torch.expm1(lq.logsumexp(dim=1))).clamp(min=TAIL_FLOOR)
    g = torch.where(valid, lp - lq, 0.0)
    has_tail = tail_p > 0
    g_tail = torch.where(has_tail, torch.log(torch.where(has_tail, tail_p, 1.0)) - torch.log(tail_q), 0.0)
    kl = (lp.exp() * g).sum(dim=1) + tail_p * g_tail
    return kl, g, g_tail, mass.exp()


class _FusedTopKReverseKLFunction(torch.autograd.Function):
    """hidden [N, D], weight [V_local, D], candidates [N, K] + teacher log-probs [N, K] -> (loss, kl, mass)."""

    @staticmethod
    def forward(ctx, hidden, weight, candidates, teacher_logp, coef, vocab_start, temperature, tp_group,
                chunk_size, logits_dtype, grads, triton_path):
        need_hidden, need_weight = grads
        head = ChunkedHead(hidden, weight, logits_dtype, chunk_size, triton_path)
        n = hidden.shape[0]
        kl, mass = (hidden.new_empty(n, dtype=torch.float32) for _ in range(2))
        owners_bad = torch.zeros((), dtype=torch.bool, device=hidden.device)
        loss = hidden.new_zeros((), dtype=torch.float64)
        grad_hidden, grad_weight = head.new_grads(need_hidden, need_weight)
        inv_temp = 1.0 / temperature
        no_target = torch.full((head.rows,), -1, dtype=torch.long, device=hidden.device)
        for start, end in head.chunks():
            logits = head.logits(start, end)
            ids = candidates[start:end]
            valid = ids >= 0
            lse, picked, owners = _candidate_stats(logits, ids, vocab_start, inv_temp, tp_group, triton_path)
            owners_bad |= (owners != valid.float()).any()
            lp = picked.double() - lse.double()[:, None]
            chunk_kl, g, g_tail, chunk_mass = bucket_kl(lp, teacher_logp[start:end].double(), valid)
            kl[start:end], mass[start:end] = chunk_kl.float(), chunk_mass.float()
            c = coef[start:end].double()
            loss += (c * chunk_kl).sum()
            if not (need_hidden or need_weight):
                continue
            grad_logits = head.grad_target(logits)
            c_tau = c * inv_temp
            tail_g = (-c_tau * (g_tail - chunk_kl)).float().contiguous()  # upstream -g of the pass: -g p
            rows = end - start
            write_logprob_grad(logits, grad_logits, no_target[:rows], vocab_start, inv_temp, lse, tail_g,
                               torch.zeros_like(tail_g), triton_path)
            local = ids - vocab_start
            mine = valid & (local >= 0) & (local < logits.shape[1])
            row, slot = mine.nonzero(as_tuple=True)
            values = c_tau[row] * lp[row, slot].exp() * (g[row, slot] - chunk_kl[row])
            grad_logits[row, local[row, slot]] = values.to(grad_logits.dtype)
            head.backprop(grad_logits, start, end, grad_hidden, grad_weight)
        if bool(owners_bad):
            raise ValueError("candidates: a candidate id lies outside [0, vocab size) (no vocab shard holds it; "
                             "check the ids and vocab_start)")
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.mark_non_differentiable(kl, mass)
        return loss.float(), kl, mass

    @staticmethod
    def backward(ctx, grad_loss, _grad_kl, _grad_mass):
        return scale_saved_grads(grad_loss, *ctx.saved_tensors) + (None,) * 10


def _check_candidates(n: int, candidates: torch.Tensor, teacher_logp: torch.Tensor,
                      mask: torch.Tensor | None) -> None:
    """Shapes, distinct ids per row and usable teacher values on the counted tokens' filled slots (one sync)."""
    if candidates.dim() != 2 or candidates.shape[0] != n or candidates.shape[1] < 1:
        raise ValueError(f"candidates must be [N, K] with N = {n} and K >= 1, got {tuple(candidates.shape)}")
    if teacher_logp.shape != candidates.shape:
        raise ValueError(f"teacher_logp must match candidates {tuple(candidates.shape)}, got "
                         f"{tuple(teacher_logp.shape)}")
    if candidates.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"candidates must hold integer token ids, got {candidates.dtype}")
    counted = candidates >= 0
    if mask is not None:
        counted &= mask[:, None]
    ordered = torch.where(counted, candidates, -1 - torch.arange(candidates.shape[1], device=candidates.device))
    repeated = (ordered.sort(dim=1).values.diff(dim=1) == 0).any()
    value = teacher_logp.to(torch.float64)
    unusable = (counted & ~(torch.isfinite(value) & (value <= LOGPROB_SLACK))).any()
    if bool(repeated | unusable):
        raise ValueError("candidates/teacher_logp: a counted token names one candidate twice, or a teacher "
                         f"log-prob of a filled slot is not finite or lies above 0 (by more than {LOGPROB_SLACK})")


def fused_topk_reverse_kl(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    candidates: torch.Tensor,
    teacher_logp: torch.Tensor,
    response_ids: torch.Tensor,
    response_weights: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    num_responses: int | torch.Tensor | None = None,
    temperature: float = 1.0,
    vocab_start: int = 0,
    tp_group=None,
    chunk_size: int | None = None,
    logits_dtype: torch.dtype | None = torch.float32,
) -> TopKReverseKLOutput:
    """Response-mean, per-domain-weighted bucketed KL(student || teacher) over K candidates per token plus the tail.

    Args:
        hidden, weight: the student's ``[N, D]`` hidden states and ``[V_local, D]`` head shard.
        candidates: ``[N, K]`` global token ids per token (distinct in a row; -1: an empty slot), the same on
            every TP rank.
        teacher_logp: ``[N, K]`` the teacher's log-probs of the candidates (at temperature 1; ignored at empty
            slots).
        response_ids: ``[N]`` index of each token's response in ``response_weights``.
        response_weights: ``[R]`` per-response weight (w_d of the response's domain).
        mask: ``[N]`` bool, true for tokens that count (default: all).
        num_responses: responses in the whole optimizer batch over all data-parallel ranks (default R).
        temperature: the student's logits are divided by it (the teacher's values are taken as given).
        vocab_start: global id of this shard's first row.
        tp_group, chunk_size: as in ``fused_linear_logprob``.
        logits_dtype: dtype of the chunk logits (default float32: the gradient is a difference of close
            distributions).

    Returns ``TopKReverseKLOutput(loss, kl, student_mass)``; only the student gets gradients, grad_hidden being
    this rank's partial sum over its vocab shard.
    """
    if response_weights.dim() != 1:
        raise ValueError(f"response_weights must be [R], got shape {tuple(response_weights.shape)}")
    check_lm_head_inputs(hidden, weight, {"response_ids": response_ids, "mask": mask}, temperature)
    mask = None if mask is None else mask.to(torch.bool)
    _check_candidates(hidden.shape[0], candidates, teacher_logp, mask)
    coef, ids, ids_bad = response_token_weights(response_ids, mask, response_weights.shape[0], num_responses)
    if bool(ids_bad):
        raise ValueError("response_ids: a valid token names a response outside [0, len(response_weights))")
    coef = coef * response_weights.to(device=hidden.device, dtype=torch.float32)[ids]
    candidates = candidates.to(torch.long)
    if mask is not None:  # a token that does not count needs no candidates (nor valid ones)
        candidates = torch.where(mask[:, None], candidates, -1)
    grad_enabled = torch.is_grad_enabled()
    grads = (grad_enabled and hidden.requires_grad, grad_enabled and weight.requires_grad)
    loss, kl, mass = _FusedTopKReverseKLFunction.apply(
        hidden, weight, candidates.contiguous(), teacher_logp.detach().to(torch.float32), coef, int(vocab_start),
        float(temperature), tp_group, chunk_size, logits_dtype, grads, use_triton(hidden.device),
    )
    return TopKReverseKLOutput(loss, kl, mass)
