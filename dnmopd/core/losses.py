"""Losses: the clipped OPD / PPO surrogate with the paper's response-mean reduction, and SFT cross-entropy.

Per token, with ratio = exp(logp - old_logp) and a detached advantage A:

    loss_t = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)

and with dual clipping (c > 1) a negative-advantage token's loss is additionally capped at -c * A.
Reduction: the masked mean over each response's valid tokens (denominator max(#valid, 1)), then the mean
over responses, so every response weighs the same whatever its length. When a batch is split over shards or
micro-batches, pass `num_responses` = responses in the whole optimizer batch: shard losses then add up to the
batch loss. With one optimizer step per rollout, logp == old_logp and the loss gradient is
-(1/R) sum_i (1/|y_i|) sum_t A_it grad log p(y_it).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def validate_clip(eps_low: float, eps_high: float, dual_clip: float | None) -> None:
    if not 0 <= eps_low < 1:
        raise ValueError(f"eps_low must lie in [0, 1), got {eps_low}")
    if eps_high < 0:
        raise ValueError(f"eps_high must be >= 0, got {eps_high}")
    if dual_clip is not None and dual_clip <= 1:
        raise ValueError(f"dual_clip must be > 1 (or None), got {dual_clip}")


def clipped_surrogate(
    log_ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float = 0.2, eps_high: float = 0.2,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped loss and a bool tensor marking tokens where clipping set the value."""
    validate_clip(eps_low, eps_high, dual_clip)
    advantages = advantages.detach()
    ratio = torch.exp(log_ratio)
    unclipped = -ratio * advantages
    clipped = -torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * advantages
    loss = torch.maximum(unclipped, clipped)
    was_clipped = clipped > unclipped
    if dual_clip is not None:
        cap = -dual_clip * advantages
        capped = (advantages < 0) & (loss > cap)
        loss = torch.where(capped, cap, loss)
        was_clipped = was_clipped | capped
    return loss, was_clipped


def response_mean(per_token: torch.Tensor, mask: torch.Tensor, num_responses: int | None = None) -> torch.Tensor:
    """sum over responses of (masked token mean of the response) / num_responses, for (B, T) tensors."""
    mask = mask.to(per_token.dtype)
    per_response = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    denominator = per_token.shape[0] if num_responses is None else num_responses
    if denominator < 1:
        raise ValueError(f"num_responses must be >= 1, got {denominator}")
    return per_response.sum() / denominator


def clipped_opd_loss_batched(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    num_responses: int | None = None,
) -> torch.Tensor:
    """Clipped OPD loss of a padded (B, T) batch. Positions where `mask` is false may hold NaN or inf in any
    input: they are replaced by 0 before exp and multiply, so they produce neither NaN loss nor NaN grads."""
    shape = logp.shape
    for name, tensor in (("old_logp", old_logp), ("advantages", advantages), ("mask", mask)):
        if tensor.shape != shape:
            raise ValueError(f"{name} shape {tuple(tensor.shape)} != logp shape {tuple(shape)}")
    if logp.dim() != 2 or shape[0] == 0:
        raise ValueError(f"expected a non-empty (B, T) batch, got shape {tuple(shape)}")
    mask = mask.bool()
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    log_ratio = torch.where(mask, logp - old_logp.detach(), zero)
    advantages = torch.where(mask, advantages.detach().to(logp.dtype), zero)
    per_token, _ = clipped_surrogate(log_ratio, advantages, eps_low, eps_high, dual_clip)
    return response_mean(per_token, mask, num_responses)


def clipped_opd_loss(
    logp: Sequence[torch.Tensor],
    old_logp: Sequence[torch.Tensor],
    advantages: Sequence[torch.Tensor],
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    num_responses: int | None = None,
) -> torch.Tensor:
    """Clipped OPD loss of ragged responses (lists of 1-D tensors over each response's valid tokens)."""
    if not logp or not len(logp) == len(old_logp) == len(advantages):
        raise ValueError(
            f"need equal, non-zero numbers of responses, got {len(logp)}, {len(old_logp)}, {len(advantages)}"
        )
    per_response = []
    for i, (new, old, adv) in enumerate(zip(logp, old_logp, advantages, strict=True)):
        if not new.shape == old.shape == adv.shape:
            raise ValueError(f"response {i}: shapes {tuple(new.shape)}, {tuple(old.shape)}, {tuple(adv.shape)}")
        per_token, _ = clipped_surrogate(new - old.detach(), adv, eps_low, eps_high, dual_clip)
        per_response.append(per_token.sum() / max(per_token.numel(), 1))
    denominator = len(per_response) if num_responses is None else num_responses
    if denominator < 1:
        raise ValueError(f"num_responses must be >= 1, got {denominator}")
    return torch.stack(per_response).sum() / denominator


def sft_loss(logp: torch.Tensor, mask: torch.Tensor, num_tokens: int | None = None) -> torch.Tensor:
    """Token-mean cross-entropy over the valid tokens of the whole batch: -sum(logp * mask) / num_tokens
    (default: the valid tokens here; pass the optimizer batch's count when sharding)."""
    if logp.shape != mask.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} != logp shape {tuple(logp.shape)}")
    mask = mask.bool()
    denominator = int(mask.sum()) if num_tokens is None else num_tokens
    if denominator < 1:
        raise ValueError("SFT loss needs at least one valid token")
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    return -torch.where(mask, logp, zero).sum() / denominator
