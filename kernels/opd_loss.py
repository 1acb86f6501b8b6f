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

Without ``old_logp`` (one optimizer step per rollout) old_logp is this pass's own log-prob, detached:
ratio == 1 exactly, no second forward. TP: as in ``linear_logprob`` (grad_hidden is this rank's partial sum,
reduced once by the caller's TP mapping).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .linear_logprob import ChunkedHead, check_targets_owned, logprob_grad_, logprob_stats
from .utils import check_lm_head_inputs, response_token_weights, scale_saved_grads


class OPDLossOutput(NamedTuple):
    loss: torch.Tensor  # 0-dim float32, differentiable w.r.t. hidden and weight
    logp: torch.Tensor  # [N] float32 student log-probs (detached), for metrics and as the next old_logp


class OPDTokenInputs(NamedTuple):
    """Per-token inputs of the loss, all [N] (detached)."""

    coef: torch.Tensor  # response-mean coefficient, 0 for masked tokens
    mask: torch.Tensor
    weight: torch.Tensor  # w of the token's response
    teacher_logp: torch.Tensor | None
    advantages: torch.Tensor | None
    old_logp: torch.Tensor | None

    def advantage(self, old: torch.Tensor, sl: slice) -> torch.Tensor:
        raw = self.advantages[sl] if self.advantages is not None else self.teacher_logp[sl] - old
        return torch.where(self.mask[sl], self.weight[sl] * raw, 0.0)


def opd_token_terms(logp, old, advantage, coef, mask, eps_low, eps_high, dual_clip):
    """Per-token weighted clipped loss ``coef * pg`` and its gradient w.r.t. logp (one chunk)."""
    ratio = torch.exp(torch.where(mask, logp - old, 0.0))
    pg_unclipped = -ratio * advantage
    pg_clipped = -ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * advantage
    pg = torch.maximum(pg_unclipped, pg_clipped)
    active = pg_unclipped >= pg_clipped
    if dual_clip is not None:
        pg_dual = -dual_clip * advantage
        dual = (advantage < 0) & (pg_dual < pg)
        pg = torch.where(dual, pg_dual, pg)
        active &= ~dual
    grad_logp = torch.where(active, coef * pg_unclipped, 0.0)
    return coef * pg, grad_logp


class _FusedOPDLossFunction(torch.autograd.Function):
    """hidden [N, D], weight [V_local, D] -> (loss [], logp [N]); gradients computed in the forward."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, inputs, clip, vocab_start, temperature, tp_group, chunk_size,
                logits_dtype, grads, ids_bad):
        need_hidden, need_weight = grads
        head = ChunkedHead(hidden, weight, logits_dtype, chunk_size)
        n = hidden.shape[0]
        logp = hidden.new_empty(n, dtype=torch.float32)
        owned = hidden.new_empty(n, dtype=torch.float32)
        loss = hidden.new_zeros((), dtype=torch.float32)
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        grad_weight = (torch.zeros_like if n == 0 else torch.empty_like)(weight) if need_weight else None
        for start, end in head.chunks():
            sl = slice(start, end)
            logits = head.logits(start, end)
            stats = logprob_stats(logits, targets[sl], vocab_start, temperature, False, tp_group)
            logp[sl], owned[sl] = stats.logp, stats.owned
            old = stats.logp if inputs.old_logp is None else inputs.old_logp[sl]
            pg, grad_logp = opd_token_terms(
                stats.logp, old, inputs.advantage(old, sl), inputs.coef[sl], inputs.mask[sl], *clip
            )
            loss += pg.sum()
            if need_hidden or need_weight:
                grad_logits = head.grad_target(logits)
                logprob_grad_(logits, grad_logits, targets[sl], vocab_start, temperature, stats, grad_logp)
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
    if not (0.0 <= eps_low < 1.0) or eps_high < 0.0:
        raise ValueError(f"need 0 <= eps_low < 1 and eps_high >= 0, got eps_low={eps_low}, eps_high={eps_high}")
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1 (or None), got {dual_clip}")
    if response_weights.dim() != 1:
        raise ValueError(f"response_weights must be [R], got shape {tuple(response_weights.shape)}")
    per_token = {"targets": targets, "response_ids": response_ids, "teacher_logp": teacher_logp,
                 "advantages": advantages, "mask": mask, "old_logp": old_logp}
    check_lm_head_inputs(hidden, weight, per_token, temperature)
    mask = torch.ones_like(targets, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    coef, ids, ids_bad = response_token_weights(response_ids, mask, response_weights.shape[0], num_responses)
    as_f32 = lambda t: None if t is None else t.detach().to(torch.float32)  # noqa: E731
    inputs = OPDTokenInputs(
        coef, mask, response_weights.to(device=hidden.device, dtype=torch.float32)[ids],
        as_f32(teacher_logp), as_f32(advantages), as_f32(old_logp),
    )
    grad_enabled = torch.is_grad_enabled()
    grads = (grad_enabled and hidden.requires_grad, grad_enabled and weight.requires_grad)
    loss, logp = _FusedOPDLossFunction.apply(
        hidden, weight, targets.contiguous(), inputs,
        (float(eps_low), float(eps_high), None if dual_clip is None else float(dual_clip)),
        int(vocab_start), float(temperature), tp_group, chunk_size, logits_dtype, grads, ids_bad,
    )
    return OPDLossOutput(loss, logp)
