"""Clipped OPD loss fused with the LM head: log-prob, loss and its gradient in one pass over the logits.

Per valid token t of response r (domain weight w_r), with logp_t from the fused log-prob pass:

    A_t     = w_r * (teacher_logp_t - old_logp_t)      (or w_r * advantages_t), detached
    ratio_t = exp(logp_t - old_logp_t)
    pg_t    = max(-ratio_t A_t, -clip(ratio_t, 1 - eps_low, 1 + eps_high) A_t)
              (dual clip c: pg_t = min(pg_t, -c A_t) where A_t < 0)
    L       = sum_r (1 / num_responses) * (1 / max(n_r, 1)) * sum_{t in r, valid} pg_t

so L is the mean over the global batch's responses of each response's token mean (reference-behavior
1.6 / 3.2), and per-rank losses add up to the batch loss over data-parallel ranks. Masked tokens have
log-ratio and advantage 0, so NaN/inf padding in teacher/old log-probs is harmless.

The upstream gradient of each token's log-prob is known as soon as its log-prob is:

    g_t = dL/dlogp_t = coef_t * (-A_t ratio_t) * 1[the unclipped branch is active]

where the branch is active unless (A_t > 0, ratio_t > 1 + eps_high), (A_t < 0, ratio_t < 1 - eps_low) or
the dual clip binds. So the forward pass of each chunk goes on to write dL/dlogits = g_t (onehot - p) / tau
(``linear_logprob._logprob_grad_kernel``) and to run the two gradient GEMMs: three GEMMs in all, and the
backward only scales the stored gradients by the loss's upstream gradient.

On the native path (``utils.use_triton``) the rows' statistics and dL/dlogits come from the native twins in
``linear_logprob``, the merge from ``merge_logprob_partials`` and the per-token loss terms from
``_opd_token_native``, the torch twin of ``_opd_token_kernel``.

Without ``old_logp`` (one optimizer step per rollout) old_logp is this pass's own log-prob, detached:
ratio == 1 exactly, no second forward. TP: as in ``linear_logprob`` (grad_hidden is this rank's partial sum,
reduced once by the caller's TP mapping).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from dnmopd.core.clipping import validate_clip

from .linear_logprob import (
    NEG_LARGE,
    check_targets_owned,
    logprob_partials,
    merge_logprob_partials,
    write_logprob_grad,
)
from .utils import ChunkedHead, check_lm_head_inputs, response_token_weights, scale_saved_grads, use_triton

TOKEN_BLOCK = 1024


@triton.jit
def _expm1(x):
    """exp(x) - 1 without cancellation near 0: a Taylor series below |x| = 0.1 (error < 1e-10 relative)."""
    series = x * (1.0 + x * (0.5 + x * (1.0 / 6.0 + x * (1.0 / 24.0 + x * (1.0 / 120.0 + x / 720.0)))))
    return tl.where(tl.abs(x) < 0.1, series, tl.exp(x) - 1.0)


@triton.jit
def _opd_token_kernel(
    partials_ptr, world, n_tokens, old_ptr, base_ptr, weight_ptr, coef_ptr, mask_ptr,
    lse_ptr, logp_ptr, owned_ptr, g_ptr, target_grad_ptr, pg_ptr,
    inv_temp, eps_low, eps_high, dual_clip,
    HAS_OLD: tl.constexpr, FROM_TEACHER: tl.constexpr, DUAL_CLIP: tl.constexpr, BLOCK: tl.constexpr,
):
    """Merge the ranks' (max, sum-exp, target, owned) and evaluate the loss and dL/dlogp per token."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < n_tokens
    m = tl.full([BLOCK], NEG_LARGE, tl.float32)
    for r in range(world):
        m = tl.maximum(m, tl.load(partials_ptr + (r * n_tokens + offs) * 4, mask=live, other=NEG_LARGE))
    sum_exp = tl.zeros([BLOCK], tl.float32)
    target = tl.zeros([BLOCK], tl.float32)
    owned = tl.zeros([BLOCK], tl.float32)
    for r in range(world):
        rank = partials_ptr + (r * n_tokens + offs) * 4
        rank_max = tl.load(rank, mask=live, other=NEG_LARGE)
        sum_exp += tl.load(rank + 1, mask=live, other=0.0) * tl.exp(rank_max - m)
        target += tl.load(rank + 2, mask=live, other=0.0)
        owned += tl.load(rank + 3, mask=live, other=0.0)
    lse = m + tl.log(tl.where(live, sum_exp, 1.0))
    logp = tl.minimum(target - lse, 0.0)
    valid = tl.load(mask_ptr + offs, mask=live, other=0) != 0
    if HAS_OLD:
        old = tl.load(old_ptr + offs, mask=live, other=0.0)
    else:
        old = logp
    raw = tl.load(base_ptr + offs, mask=live, other=0.0)
    if FROM_TEACHER:
        raw = raw - old
    advantage = tl.where(valid, tl.load(weight_ptr + offs, mask=live, other=0.0) * raw, 0.0)
    ratio = tl.exp(tl.where(valid, logp - old, 0.0))
    pg_unclipped = -ratio * advantage
    pg_clipped = -tl.minimum(tl.maximum(ratio, 1.0 - eps_low), 1.0 + eps_high) * advantage
    pg = tl.maximum(pg_unclipped, pg_clipped)
    active = pg_unclipped >= pg_clipped
    if DUAL_CLIP:
        cap = -dual_clip * advantage
        capped = (advantage < 0.0) & (cap < pg)
        pg = tl.where(capped, cap, pg)
        active = active & (~capped)
    coef = tl.load(coef_ptr + offs, mask=live, other=0.0)
    g = tl.where(active, coef * pg_unclipped, 0.0) * inv_temp
    tl.store(lse_ptr + offs, lse, mask=live)
    tl.store(logp_ptr + offs, logp, mask=live)
    tl.store(owned_ptr + offs, owned, mask=live)
    tl.store(g_ptr + offs, g, mask=live)
    tl.store(target_grad_ptr + offs, tl.where(g != 0.0, -g * _expm1(logp), 0.0), mask=live)
    tl.store(pg_ptr + offs, coef * pg, mask=live)


class OPDLossOutput(NamedTuple):
    loss: torch.Tensor  # 0-dim float32, differentiable w.r.t. hidden and weight
    logp: torch.Tensor  # [N] float32 student log-probs (detached), for metrics and as the next old_logp


class OPDTokenInputs(NamedTuple):
    """Per-token inputs of the loss, all [N] float32 (detached) except the bool mask."""

    coef: torch.Tensor  # response-mean coefficient, 0 for masked tokens
    mask: torch.Tensor
    weight: torch.Tensor  # w of the token's response
    base: torch.Tensor  # teacher_logp (advantage w * (teacher - old)) or the advantages (w * advantages)
    from_teacher: bool
    old_logp: torch.Tensor | None
    clip: tuple[float, float, float | None]  # eps_low, eps_high, dual_clip


class TokenBuffers:
    """Per-chunk vectors the token kernel writes: lse, dL/dlogp / tau, target entry, weighted loss."""

    def __init__(self, rows: int, device):
        self.lse, self.g, self.target_grad, self.pg = (
            torch.empty(rows, dtype=torch.float32, device=device) for _ in range(4)
        )

    def rows(self, n: int):
        return self.lse[:n], self.g[:n], self.target_grad[:n], self.pg[:n]


def _opd_token_native(partials, inputs: OPDTokenInputs, sl: slice, inv_temp: float, logp, owned):
    """``_opd_token_kernel`` in torch, on the merge shared with ``fused_linear_logprob``."""
    stats = merge_logprob_partials(partials, with_entropy=False)
    logp[sl], owned[sl] = stats.logp, stats.owned
    eps_low, eps_high, dual_clip = inputs.clip
    valid = inputs.mask[sl]
    old = stats.logp if inputs.old_logp is None else inputs.old_logp[sl]
    raw = inputs.base[sl] - old if inputs.from_teacher else inputs.base[sl]
    advantage = torch.where(valid, inputs.weight[sl] * raw, 0.0)
    ratio = torch.exp(torch.where(valid, stats.logp - old, 0.0))
    pg_unclipped = -ratio * advantage
    pg_clipped = -ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * advantage
    pg = torch.maximum(pg_unclipped, pg_clipped)
    active = pg_unclipped >= pg_clipped
    if dual_clip is not None:
        cap = -dual_clip * advantage
        capped = (advantage < 0.0) & (cap < pg)
        pg = torch.where(capped, cap, pg)
        active &= ~capped
    coef = inputs.coef[sl]
    g = torch.where(active, coef * pg_unclipped, 0.0) * inv_temp
    target_grad = torch.where(g != 0.0, -g * torch.expm1(stats.logp), 0.0)
    return stats.lse, g, target_grad, coef * pg


def opd_token_terms(partials, inputs: OPDTokenInputs, sl: slice, temperature: float, logp, owned, buffers,
                    triton_path: bool):
    """The per-token loss terms of one chunk; writes logp/owned rows and returns (lse, g, target_grad, pg)."""
    if not triton_path:
        return _opd_token_native(partials, inputs, sl, 1.0 / temperature, logp, owned)
    world, rows = partials.shape[0], partials.shape[1]
    lse, g, target_grad, pg = buffers.rows(rows)
    eps_low, eps_high, dual_clip = inputs.clip
    old = inputs.old_logp
    _opd_token_kernel[(triton.cdiv(rows, TOKEN_BLOCK),)](
        partials, world, rows, inputs.base if old is None else old[sl], inputs.base[sl], inputs.weight[sl],
        inputs.coef[sl], inputs.mask[sl], lse, logp[sl], owned[sl], g, target_grad, pg,
        1.0 / temperature, eps_low, eps_high, 0.0 if dual_clip is None else dual_clip,
        HAS_OLD=old is not None, FROM_TEACHER=inputs.from_teacher, DUAL_CLIP=dual_clip is not None,
        BLOCK=TOKEN_BLOCK, num_warps=4,
    )
    return lse, g, target_grad, pg


class _FusedOPDLossFunction(torch.autograd.Function):
    """hidden [N, D], weight [V_local, D] -> (loss [], logp [N]); gradients computed in the forward."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, inputs, vocab_start, temperature, tp_group, chunk_size,
                logits_dtype, grads, ids_bad, triton_path):
        need_hidden, need_weight = grads
        head = ChunkedHead(hidden, weight, logits_dtype, chunk_size, triton_path)
        n = hidden.shape[0]
        logp = hidden.new_empty(n, dtype=torch.float32)
        owned = hidden.new_empty(n, dtype=torch.float32)
        loss = hidden.new_zeros((), dtype=torch.float32)
        buffers = TokenBuffers(min(head.rows, max(n, 1)), hidden.device) if triton_path else None
        grad_hidden, grad_weight = head.new_grads(need_hidden, need_weight)
        for start, end in head.chunks():
            sl = slice(start, end)
            logits = head.logits(start, end)
            partials = logprob_partials(logits, targets[sl], vocab_start, temperature, False, tp_group, triton_path)
            lse, g, target_grad, pg = opd_token_terms(partials, inputs, sl, temperature, logp, owned, buffers,
                                                      triton_path)
            loss += pg.sum()
            if need_hidden or need_weight:
                grad_logits = head.grad_target(logits)
                write_logprob_grad(logits, grad_logits, targets[sl], vocab_start, 1.0 / temperature, lse, g,
                                   target_grad, triton_path)
                head.backprop(grad_logits, start, end, grad_hidden, grad_weight)
        check_targets_owned(owned, inputs.mask, ids_bad)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.mark_non_differentiable(logp)
        return loss, logp

    @staticmethod
    def backward(ctx, grad_loss, _grad_logp):
        return scale_saved_grads(grad_loss, *ctx.saved_tensors) + (None,) * 10


def fused_opd_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    response_ids: torch.Tensor,
    response_weights: torch.Tensor,
    *,
    teacher_logp: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    old_logp: torch.Tensor | None = None,
    num_responses: int | torch.Tensor | None = None,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    temperature: float = 1.0,
    vocab_start: int = 0,
    tp_group=None,
    chunk_size: int | None = None,
    logits_dtype: torch.dtype | None = None,
) -> OPDLossOutput:
    """Clipped OPD loss of sampled tokens, with the LM head fused in (see the module docstring for the math).

    Args:
        hidden: ``[N, D]`` final hidden states of the tokens (replicated over the TP group).
        weight: ``[V_local, D]`` this rank's contiguous vocab shard of the LM head.
        targets: ``[N]`` sampled token ids (global vocab ids).
        response_ids: ``[N]`` index of each token's response in ``response_weights`` (any value where
            ``mask`` is false).
        response_weights: ``[R]`` per-response advantage multiplier, i.e. the DN weight w_d of the
            response's domain (ones for the Label method).
        teacher_logp: ``[N]`` teacher log-probs; the advantage is ``w * (teacher_logp - old_logp)``.
        advantages: ``[N]`` instead of ``teacher_logp``: the advantage is ``w * advantages``.
        mask: ``[N]`` bool, true for tokens that count (default: all).
        old_logp: ``[N]`` log-probs of the policy that sampled / the pre-update policy. None: this pass's own
            log-prob, detached (one optimizer step per rollout: ratio == 1, clipping never binds).
        num_responses: responses in the whole optimizer batch over all data-parallel ranks (default R).
        eps_low, eps_high: PPO clip range ``[1 - eps_low, 1 + eps_high]``.
        dual_clip: dual-clip constant c > 1 for negative advantages (None: off).
        temperature: logits are divided by it before the softmax.
        vocab_start, tp_group, chunk_size, logits_dtype: as in ``fused_linear_logprob``.

    Returns ``OPDLossOutput(loss, logp)``. The loss is this rank's share of the global response mean
    (sum it over data-parallel ranks); grad_hidden is the partial sum over this rank's vocab shard.
    """
    if (teacher_logp is None) == (advantages is None):
        raise ValueError("pass exactly one of teacher_logp (advantage w*(teacher-old)) or advantages")
    validate_clip(eps_low, eps_high, dual_clip)
    if response_weights.dim() != 1:
        raise ValueError(f"response_weights must be [R], got shape {tuple(response_weights.shape)}")
    per_token = {"targets": targets, "response_ids": response_ids, "teacher_logp": teacher_logp,
                 "advantages": advantages, "mask": mask, "old_logp": old_logp}
    check_lm_head_inputs(hidden, weight, per_token, temperature)
    mask = torch.ones_like(targets, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    coef, ids, ids_bad = response_token_weights(response_ids, mask, response_weights.shape[0], num_responses)
    base = teacher_logp if advantages is None else advantages
    inputs = OPDTokenInputs(
        coef, mask.contiguous(), response_weights.to(device=hidden.device, dtype=torch.float32)[ids],
        base.detach().to(torch.float32).contiguous(), advantages is None,
        None if old_logp is None else old_logp.detach().to(torch.float32).contiguous(),
        (float(eps_low), float(eps_high), None if dual_clip is None else float(dual_clip)),
    )
    grad_enabled = torch.is_grad_enabled()
    grads = (grad_enabled and hidden.requires_grad, grad_enabled and weight.requires_grad)
    loss, logp = _FusedOPDLossFunction.apply(
        hidden, weight, targets.contiguous(), inputs, int(vocab_start), float(temperature), tp_group,
        chunk_size, logits_dtype, grads, ids_bad, use_triton(hidden.device),
    )
    return OPDLossOutput(loss, logp)
