"""Per-token log-prob (and entropy) of sampled tokens straight from hidden states and a vocab-sharded head.

Math, per token t with scaled logits s = (h_t W^T) / tau over the full vocabulary (all TP shards):

    LSE_t  = log sum_v exp(s_v)              logp_t = s_{y_t} - LSE_t      (<= 0)
    p_v    = exp(s_v - LSE_t)                mu_t   = sum_v p_v s_v
    H_t    = LSE_t - mu_t                    (entropy)

Gradients with upstream g_t = dL/dlogp_t and e_t = dL/dH_t, chain-ruled to the raw logits z = tau * s:

    dL/dz_v = [ g_t (1[v = y_t] - p_v) - e_t p_v (s_v - mu_t) ] / tau

The target entry uses 1 - p_y = -expm1(logp_t) in fp32, so nothing cancels when p_y -> 1; every row of
dL/dz sums to zero. dL/dh = dL/dz @ W (a partial sum over this rank's vocab shard) and dL/dW = dL/dz^T @ h.

Passes, per token chunk (logits of one chunk exist at a time, never [N, V]):
  1. logits = h_chunk @ W^T (cuBLAS), in ``logits_dtype``;
  2. ``_logprob_stats_kernel``: one program per row streams its vocab shard once with an online
     max / sum-exp (and entropy moment), and takes the target logit where it lies;
  3. one all-gather of the packed per-token stats over the TP group; every rank merges identically;
  4. (backward) ``_logprob_grad_kernel`` overwrites the logits with dL/dz, then two GEMMs give the
     hidden and weight gradients.

Passes 2 and 4 have native twins, ``_logprob_stats_native`` and ``_logprob_grad_native`` (whole-row torch
ops on the chunk, same packed stats and the same dL/dz), run wherever ``utils.use_triton`` says so: by
default on every non-CUDA tensor. Steps 1 and 3 and all the per-token math are shared.

Tensor parallelism and who reduces grad_hidden: each rank holds a contiguous vocab shard
``[vocab_start, vocab_start + V_local)`` and returns grad_hidden as its *partial* sum over that shard.
The caller reduces it exactly once over the TP group, in the autograd op that produced ``hidden`` for
the head: Megatron's ``copy_to_tensor_model_parallel_region`` (all-reduce in backward) or, with sequence
parallelism, ``gather_from_sequence_parallel_region`` (reduce-scatter in backward). These kernels never
reduce grad_hidden themselves; the weight gradient is local to the shard and needs no TP reduction.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from .utils import (
    ChunkedHead,
    check_lm_head_inputs,
    gather_token_stats,
    merge_max_sumexp,
    scaled_float32,
    use_triton,
    vocab_block,
)

# Packed per-token stats of one rank: running max, sum exp(s - max), target logit (0 when the target is
# not in this shard), ownership flag, and sum (s - max) exp(s - max) for the entropy.
STAT_MAX, STAT_SUM, STAT_TARGET, STAT_OWNED, STAT_ENT = range(5)
# Initial running max: finite, so that exp(m - m_new) is 0 and (m - m_new) * 0 stays 0 (not NaN).
NEG_LARGE: tl.constexpr = tl.constexpr(-1.0e30)


@triton.jit
def _logprob_stats_kernel(
    logits_ptr, stride_row, targets_ptr, stats_ptr, n_cols, vocab_start, inv_temp,
    NUM_STATS: tl.constexpr, WITH_ENTROPY: tl.constexpr, BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    target = tl.load(targets_ptr + row) - vocab_start
    m = NEG_LARGE
    sum_exp = 0.0
    ent = 0.0
    target_logit = 0.0
    for start in range(0, n_cols, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        valid = cols < n_cols
        s = tl.load(row_ptr + cols, mask=valid, other=float("-inf")).to(tl.float32) * inv_temp
        m_new = tl.maximum(m, tl.max(s, 0))
        alpha = tl.exp(m - m_new)
        e = tl.exp(s - m_new)
        if WITH_ENTROPY:
            shifted = tl.where(valid, s - m_new, 0.0) * e
            ent = alpha * (ent + (m - m_new) * sum_exp) + tl.sum(shifted, 0)
        sum_exp = sum_exp * alpha + tl.sum(e, 0)
        m = m_new
        target_logit += tl.sum(tl.where(valid & (cols == target), s, 0.0), 0)
    owned = (target >= 0) & (target < n_cols)
    out = stats_ptr + row * NUM_STATS
    tl.store(out + 0, m)
    tl.store(out + 1, sum_exp)
    tl.store(out + 2, target_logit)
    tl.store(out + 3, owned.to(tl.float32))
    if WITH_ENTROPY:
        tl.store(out + 4, ent)


def _logprob_stats_native(logits: torch.Tensor, targets: torch.Tensor, vocab_start: int, inv_temp: float,
                          with_entropy: bool) -> torch.Tensor:
    """``_logprob_stats_kernel`` in torch: the same packed ``[C, k]`` stats, each row in one piece."""
    s = scaled_float32(logits, inv_temp)
    n_cols = s.shape[1]
    m = s.amax(dim=1, keepdim=True)
    shifted = s - m
    e = shifted.exp() if with_entropy else shifted.exp_()
    local = targets - vocab_start
    owned = (local >= 0) & (local < n_cols)
    target = s.gather(1, local.clamp(0, n_cols - 1)[:, None])[:, 0]
    columns = [m[:, 0], e.sum(dim=1), torch.where(owned, target, 0.0), owned.to(torch.float32)]
    if with_entropy:
        columns.append(e.mul_(shifted).sum(dim=1))
    return torch.stack(columns, dim=1)


@triton.jit
def _logprob_grad_kernel(
    logits_ptr, stride_row, grad_ptr, stride_grad_row, targets_ptr, lse_ptr, g_ptr, target_grad_ptr,
    g_ent_ptr, mu_ptr, n_cols, vocab_start, inv_temp,
    WITH_ENTROPY: tl.constexpr, BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    grad_row_ptr = grad_ptr + row * stride_grad_row
    target = tl.load(targets_ptr + row) - vocab_start
    lse = tl.load(lse_ptr + row)
    g = tl.load(g_ptr + row)  # already divided by the temperature
    target_grad = tl.load(target_grad_ptr + row)
    active = g != 0.0
    g_ent = 0.0
    mu = 0.0
    if WITH_ENTROPY:
        g_ent = tl.load(g_ent_ptr + row)
        mu = tl.load(mu_ptr + row)
        active = active | (g_ent != 0.0)
    n_live = tl.where(active, n_cols, 0)  # an inactive row reads nothing and writes zeros
    for start in range(0, n_cols, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        valid = cols < n_cols
        s = tl.load(row_ptr + cols, mask=cols < n_live, other=0.0).to(tl.float32) * inv_temp
        p = tl.exp(tl.minimum(s - lse, 0.0))  # s <= lse; the clamp keeps inactive rows' zeros finite
        grad = -g * p
        if WITH_ENTROPY:
            grad -= g_ent * p * (s - mu)
        grad = tl.where(cols == target, target_grad, grad)
        grad = tl.where(active, grad, 0.0)
        tl.store(grad_row_ptr + cols, grad.to(grad_ptr.dtype.element_ty), mask=valid)


def _logprob_grad_native(logits, grad_logits, targets, vocab_start, inv_temp, lse, g, target_grad, g_ent, mu):
    """``_logprob_grad_kernel`` in torch: dL/dz = -p (g + g_ent (s - mu)), target entry and inactive rows
    as there."""
    s = scaled_float32(logits, inv_temp, out=grad_logits)
    active = g != 0.0
    factor = -g[:, None]
    if g_ent is not None:
        factor = (s - mu[:, None]).mul_(g_ent[:, None]).add_(g[:, None]).neg_()
        active |= g_ent != 0.0
    grad = s.sub_(lse[:, None]).clamp_(max=0.0).exp_().mul_(factor)
    local = targets - vocab_start
    owned = (local >= 0) & (local < s.shape[1])
    grad[owned, local[owned]] = target_grad[owned]
    grad[~active] = 0.0
    if grad.data_ptr() != grad_logits.data_ptr():
        grad_logits.copy_(grad)


class LogprobStats(NamedTuple):
    """Merged per-token statistics of one chunk (identical on every TP rank)."""

    lse: torch.Tensor  # log-sum-exp of the scaled logits
    logp: torch.Tensor  # log-prob of the target, <= 0
    owned: torch.Tensor | None = None  # number of shards that held the target (1 for a valid target)
    entropy: torch.Tensor | None = None
    mu: torch.Tensor | None = None  # mean scaled logit under p
    target_centered: torch.Tensor | None = None  # s_y - mu, formed without cancellation when p_y -> 1

    def rows(self, sl: slice) -> LogprobStats:
        return LogprobStats(*(None if t is None else t[sl] for t in self))


def logprob_partials(logits: torch.Tensor, targets: torch.Tensor, vocab_start: int, temperature: float,
                     with_entropy: bool, tp_group, triton_path: bool) -> torch.Tensor:
    """Per-rank packed stats of one logits chunk ``[C, V_local]``, all-gathered to ``[world, C, k]``."""
    if not triton_path:
        return gather_token_stats(
            _logprob_stats_native(logits, targets, vocab_start, 1.0 / temperature, with_entropy), tp_group
        )
    rows, n_cols = logits.shape
    num_stats = 5 if with_entropy else 4
    packed = torch.empty((rows, num_stats), dtype=torch.float32, device=logits.device)
    block, warps = vocab_block(n_cols)
    _logprob_stats_kernel[(rows,)](
        logits, logits.stride(0), targets, packed, n_cols, vocab_start, 1.0 / temperature,
        NUM_STATS=num_stats, WITH_ENTROPY=with_entropy, BLOCK_V=block, num_warps=warps,
    )
    return gather_token_stats(packed, tp_group)


def merge_logprob_partials(gathered: torch.Tensor, with_entropy: bool) -> LogprobStats:
    """Merge the all-gathered ``[world, C, k]`` stats of one chunk (identically on every rank)."""
    m, sum_exp, scale = merge_max_sumexp(gathered[..., STAT_MAX], gathered[..., STAT_SUM])
    log_sum = torch.log(sum_exp)
    lse = m + log_sum
    target = gathered[..., STAT_TARGET].sum(0)
    logp = (target - lse).clamp(max=0.0)
    owned = gathered[..., STAT_OWNED].sum(0)
    if not with_entropy:
        return LogprobStats(lse, logp, owned)
    # sum_v (s_v - m) exp(s_v - m) over all shards, each shard's term moved from its own max to m.
    shifted = (scale * (gathered[..., STAT_ENT] + (gathered[..., STAT_MAX] - m) * gathered[..., STAT_SUM])).sum(0)
    mean_shift = shifted / sum_exp
    entropy = (log_sum - mean_shift).clamp(min=0.0)
    return LogprobStats(lse, logp, owned, entropy, m + mean_shift, (target - m) - mean_shift)


def write_logprob_grad(logits: torch.Tensor, grad_logits: torch.Tensor, targets: torch.Tensor,
                       vocab_start: int, inv_temp: float, lse: torch.Tensor, g: torch.Tensor,
                       target_grad: torch.Tensor, triton_path: bool, g_ent: torch.Tensor | None = None,
                       mu: torch.Tensor | None = None) -> None:
    """dL/dlogits = -g p - g_ent p (s - mu), with ``target_grad`` at the target; g, g_ent already / tau."""
    if not triton_path:
        _logprob_grad_native(logits, grad_logits, targets, vocab_start, inv_temp, lse, g, target_grad, g_ent, mu)
        return
    rows, n_cols = logits.shape
    with_entropy = g_ent is not None
    block, warps = vocab_block(n_cols)
    _logprob_grad_kernel[(rows,)](
        logits, logits.stride(0), grad_logits, grad_logits.stride(0), targets, lse, g, target_grad,
        g_ent if with_entropy else g, mu if with_entropy else lse, n_cols, vocab_start, inv_temp,
        WITH_ENTROPY=with_entropy, BLOCK_V=block, num_warps=warps,
    )


def logprob_grad_(logits: torch.Tensor, grad_logits: torch.Tensor, targets: torch.Tensor, vocab_start: int,
                  temperature: float, stats: LogprobStats, grad_logp: torch.Tensor,
                  grad_entropy: torch.Tensor | None, triton_path: bool) -> None:
    """Write dL/dlogits of one chunk into ``grad_logits`` (may alias ``logits``) from upstream gradients."""
    inv_temp = 1.0 / temperature
    g = (grad_logp.to(torch.float32) * inv_temp).contiguous()
    target_grad = -g * torch.expm1(stats.logp)
    active = g != 0
    g_ent = None
    if grad_entropy is not None:
        g_ent = (grad_entropy.to(torch.float32) * inv_temp).contiguous()
        target_grad = target_grad - g_ent * torch.exp(stats.logp) * stats.target_centered
        active |= g_ent != 0
    target_grad = torch.where(active, target_grad, 0.0)
    write_logprob_grad(logits, grad_logits, targets, vocab_start, inv_temp, stats.lse, g, target_grad, triton_path,
                       g_ent, stats.mu)


def check_targets_owned(owned: torch.Tensor, mask: torch.Tensor | None, ids_bad: torch.Tensor | None = None):
    """One host sync: every counted token's target lies in exactly one vocab shard (and its response id is
    valid, when ``ids_bad`` is given)."""
    bad = owned != 1.0
    if mask is not None:
        bad &= mask
    bad = bad.any()
    if ids_bad is not None:
        bad |= ids_bad
    if bool(bad):
        detail = "" if ids_bad is None else (
            ", or a counted token's response_ids entry lies outside [0, len(response_weights))"
        )
        raise ValueError(
            "targets: a counted token's id lies outside [0, vocab size) (no vocab shard holds it; check targets "
            f"and vocab_start){detail}"
        )


class _LinearLogprobFunction(torch.autograd.Function):
    """hidden [N, D], weight [V_local, D], targets [N] (global ids) -> logp [N], entropy [N] or None.

    Forward saves only per-token vectors; backward recomputes each chunk's logits (4 GEMMs in all), so any
    per-token upstream gradient works.
    """

    @staticmethod
    def forward(ctx, hidden, weight, targets, vocab_start, temperature, with_entropy, tp_group, chunk_size,
                logits_dtype, triton_path):
        head = ChunkedHead(hidden, weight, logits_dtype, chunk_size, triton_path)
        n = hidden.shape[0]
        fields = 6 if with_entropy else 3
        stats = LogprobStats(*(hidden.new_empty(n, dtype=torch.float32) for _ in range(fields)))
        for start, end in head.chunks():
            partials = logprob_partials(head.logits(start, end), targets[start:end], vocab_start, temperature,
                                        with_entropy, tp_group, triton_path)
            for full, part in zip(stats, merge_logprob_partials(partials, with_entropy), strict=True):
                if full is not None:
                    full[start:end] = part
        check_targets_owned(stats.owned, None)
        ctx.save_for_backward(hidden, weight, targets, *stats)
        ctx.config = (vocab_start, temperature, chunk_size, logits_dtype, triton_path)
        return stats.logp, stats.entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, targets, *saved = ctx.saved_tensors
        stats = LogprobStats(*saved)
        vocab_start, temperature, chunk_size, logits_dtype, triton_path = ctx.config
        if grad_logp is None:
            grad_logp = torch.zeros_like(stats.logp)
        head = ChunkedHead(hidden, weight, logits_dtype, chunk_size, triton_path)
        grad_hidden, grad_weight = head.new_grads(ctx.needs_input_grad[0], ctx.needs_input_grad[1])
        for start, end in head.chunks():
            logits = head.logits(start, end)
            grad_logits = head.grad_target(logits)
            sl = slice(start, end)
            logprob_grad_(logits, grad_logits, targets[sl], vocab_start, temperature, stats.rows(sl),
                          grad_logp[sl], None if grad_entropy is None else grad_entropy[sl], triton_path)
            head.backprop(grad_logits, start, end, grad_hidden, grad_weight)
        return grad_hidden, grad_weight, None, None, None, None, None, None, None, None


def fused_linear_logprob(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    vocab_start: int = 0,
    temperature: float = 1.0,
    return_entropy: bool = False,
    tp_group=None,
    chunk_size: int | None = None,
    logits_dtype: torch.dtype | None = None,
):
    """Log-prob of ``targets`` under ``softmax(hidden @ weight.T / temperature)`` without materialising logits.

    Args:
        hidden: ``[N, D]`` final hidden states (replicated across the TP group).
        weight: ``[V_local, D]`` this rank's contiguous vocab shard of the LM head.
        targets: ``[N]`` global token ids; each must lie in exactly one rank's shard.
        vocab_start: global id of this shard's first row.
        temperature: logits are divided by it (sampling temperature of the rollout).
        return_entropy: also return the full-vocab entropy ``[N]`` (differentiable).
        tp_group: process group over which the vocab is sharded (None: unsharded).
        chunk_size: tokens per chunk (default: sized so the chunk's buffers take < 1 GiB on the Triton path,
            ``utils.DEFAULT_CHUNK_BYTES``, and ``utils.NATIVE_CHUNK_BYTES`` on the native path).
        logits_dtype: dtype of the chunk's logits (default ``hidden.dtype``; float32 costs more memory
            traffic and avoids rounding logits to bf16).

    Returns ``logp`` ``[N]`` float32 (<= 0), or ``(logp, entropy)``. Backward takes any per-token upstream
    gradient; grad_hidden is this rank's partial sum over its vocab shard (see the module docstring for
    who reduces it).
    """
    check_lm_head_inputs(hidden, weight, {"targets": targets}, temperature)
    logp, entropy = _LinearLogprobFunction.apply(
        hidden, weight, targets.contiguous(), int(vocab_start), float(temperature), bool(return_entropy),
        tp_group, chunk_size, logits_dtype, use_triton(hidden.device),
    )
    return (logp, entropy) if return_entropy else logp
