"""Full-vocabulary reverse KL(student || teacher) per token, fused with both LM heads.

Per token t with scaled student logits s = (h_t W^T) / tau and teacher logits u = (h^T_t W_T^T) / tau,
p = softmax(s), q = softmax(u), over the whole vocabulary (all TP shards):

    KL_t = sum_v p_v (log p_v - log q_v) = a_t / l_t - LSE(s) + LSE(u),
    a_t  = sum_v exp(s_v - m_t) (s_v - u_v),   l_t = sum_v exp(s_v - m_t)

    L = sum_r (w_r / num_responses) * (1 / max(n_r, 1)) * sum_{t in r, valid} KL_t

with per-response (per-domain) weights w_r and the same response-mean reduction as the OPD loss.
Gradient for the student only (the teacher is a constant):

    dKL_t/dz_v = p_v [ (s_v - LSE(s)) - (u_v - LSE(u)) - KL_t ] / tau

Each row of it sums to zero. The loss weights are known before the pass, so the gradient is produced in
the forward: per token chunk, two logits GEMMs (student, teacher; or a slice of given teacher logits),
``_rkl_stats_kernel`` streams both rows once with online max / sum-exp for each distribution and the cross
term a (rescaled with the student max), one all-gather merges the 5 packed scalars per token over the TP
group, ``_rkl_grad_kernel`` writes dL/dz, and two GEMMs give grad_hidden (this rank's partial sum over its
vocab shard, reduced once by the caller's TP mapping as in ``linear_logprob``) and grad_weight.

On the native path (``utils.use_triton``) ``_rkl_stats_native`` and ``_rkl_grad_native``, the torch twins of
the two kernels, produce the same packed stats and dL/dz; the chunking, GEMMs and merge are shared.

Logits default to float32 here: the KL gradient is a small difference of nearly equal distributions and
bf16-rounded logits give percent-level gradient errors.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from .linear_logprob import NEG_LARGE
from .utils import (
    ChunkedHead,
    check_lm_head_inputs,
    gather_token_stats,
    merge_max_sumexp,
    response_token_weights,
    scale_saved_grads,
    scaled_float32,
    use_triton,
    vocab_block,
)


@triton.jit
def _rkl_stats_kernel(
    student_ptr, stride_s, teacher_ptr, stride_t, stats_ptr, n_cols, inv_temp, BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    s_row = student_ptr + row * stride_s
    t_row = teacher_ptr + row * stride_t
    m_s = NEG_LARGE
    l_s = 0.0
    m_t = NEG_LARGE
    l_t = 0.0
    cross = 0.0
    for start in range(0, n_cols, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        valid = cols < n_cols
        s = tl.load(s_row + cols, mask=valid, other=float("-inf")).to(tl.float32) * inv_temp
        u = tl.load(t_row + cols, mask=valid, other=float("-inf")).to(tl.float32) * inv_temp
        m_s_new = tl.maximum(m_s, tl.max(s, 0))
        alpha = tl.exp(m_s - m_s_new)
        e_s = tl.exp(s - m_s_new)
        l_s = l_s * alpha + tl.sum(e_s, 0)
        cross = cross * alpha + tl.sum((tl.where(valid, s, 0.0) - tl.where(valid, u, 0.0)) * e_s, 0)
        m_s = m_s_new
        m_t_new = tl.maximum(m_t, tl.max(u, 0))
        l_t = l_t * tl.exp(m_t - m_t_new) + tl.sum(tl.exp(u - m_t_new), 0)
        m_t = m_t_new
    out = stats_ptr + row * 5
    tl.store(out + 0, m_s)
    tl.store(out + 1, l_s)
    tl.store(out + 2, m_t)
    tl.store(out + 3, l_t)
    tl.store(out + 4, cross)


def _rkl_stats_native(student: torch.Tensor, teacher: torch.Tensor, inv_temp: float) -> torch.Tensor:
    """``_rkl_stats_kernel`` in torch: the same packed ``[C, 5]`` stats, each row in one piece."""
    s, u = scaled_float32(student, inv_temp), scaled_float32(teacher, inv_temp)
    m_s = s.amax(dim=1, keepdim=True)
    e_s = (s - m_s).exp_()
    l_s = e_s.sum(dim=1)
    cross = e_s.mul_(s - u).sum(dim=1)
    m_t = u.amax(dim=1, keepdim=True)
    l_t = (u - m_t).exp_().sum(dim=1)
    return torch.stack([m_s[:, 0], l_s, m_t[:, 0], l_t, cross], dim=1)


@triton.jit
def _rkl_grad_kernel(
    student_ptr, stride_s, teacher_ptr, stride_t, grad_ptr, stride_g, lse_s_ptr, lse_t_ptr, kl_ptr, coef_ptr,
    n_cols, inv_temp, BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    s_row = student_ptr + row * stride_s
    t_row = teacher_ptr + row * stride_t
    g_row = grad_ptr + row * stride_g
    lse_s = tl.load(lse_s_ptr + row)
    lse_t = tl.load(lse_t_ptr + row)
    kl = tl.load(kl_ptr + row)
    coef = tl.load(coef_ptr + row)  # already divided by the temperature
    n_live = tl.where(coef != 0.0, n_cols, 0)  # a zero-weight row reads nothing and writes zeros
    for start in range(0, n_cols, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        live = cols < n_live
        s = tl.load(s_row + cols, mask=live, other=0.0).to(tl.float32) * inv_temp
        u = tl.load(t_row + cols, mask=live, other=0.0).to(tl.float32) * inv_temp
        log_p = s - lse_s
        grad = coef * tl.exp(log_p) * (log_p - (u - lse_t) - kl)
        grad = tl.where(live, grad, 0.0)
        tl.store(g_row + cols, grad.to(grad_ptr.dtype.element_ty), mask=cols < n_cols)


def _rkl_grad_native(student, teacher, grad_logits, lse_s, lse_t, kl, coef, inv_temp):
    """``_rkl_grad_kernel`` in torch: dL/dz = coef p (log p - log q - KL), zero rows where coef is 0."""
    s, u = scaled_float32(student, inv_temp, out=grad_logits), scaled_float32(teacher, inv_temp)
    log_p = s.sub_(lse_s[:, None])
    diff = (log_p - u).add_((lse_t - kl)[:, None])
    grad = log_p.exp_().mul_(diff).mul_(coef[:, None])
    grad[coef == 0.0] = 0.0
    if grad.data_ptr() != grad_logits.data_ptr():
        grad_logits.copy_(grad)


class ReverseKLOutput(NamedTuple):
    loss: torch.Tensor  # 0-dim float32, differentiable w.r.t. the student's hidden and weight
    kl: torch.Tensor  # [N] float32 per-token KL(student || teacher) (detached), for metrics


def rkl_grad_(student, teacher, grad_logits, lse_s, lse_t, kl, coef, inv_temp, triton_path: bool) -> None:
    """Write dL/dlogits of one chunk into ``grad_logits`` (may alias ``student``); coef already / tau."""
    if not triton_path:
        _rkl_grad_native(student, teacher, grad_logits, lse_s, lse_t, kl, coef, inv_temp)
        return
    block, warps = vocab_block(student.shape[1])
    _rkl_grad_kernel[(student.shape[0],)](
        student, student.stride(0), teacher, teacher.stride(0), grad_logits, grad_logits.stride(0), lse_s, lse_t,
        kl, coef, student.shape[1], inv_temp, BLOCK_V=block, num_warps=warps,
    )


def rkl_stats(student: torch.Tensor, teacher: torch.Tensor, temperature: float, tp_group, triton_path: bool):
    """Merged (lse_student, lse_teacher, kl) of one chunk; one all-gather over the TP group."""
    if not triton_path:
        packed = _rkl_stats_native(student, teacher, 1.0 / temperature)
    else:
        rows, n_cols = student.shape
        packed = torch.empty((rows, 5), dtype=torch.float32, device=student.device)
        block, warps = vocab_block(n_cols)
        _rkl_stats_kernel[(rows,)](
            student, student.stride(0), teacher, teacher.stride(0), packed, n_cols, 1.0 / temperature,
            BLOCK_V=block, num_warps=warps,
        )
    gathered = gather_token_stats(packed, tp_group)
    m_s, l_s, scale_s = merge_max_sumexp(gathered[..., 0], gathered[..., 1])
    m_t, l_t, _ = merge_max_sumexp(gathered[..., 2], gathered[..., 3])
    cross = (scale_s * gathered[..., 4]).sum(0)
    lse_s, lse_t = m_s + torch.log(l_s), m_t + torch.log(l_t)
    return lse_s, lse_t, cross / l_s - lse_s + lse_t


class _FusedReverseKLFunction(torch.autograd.Function):
    """hidden [N, Ds], weight [V_local, Ds] (+ teacher) -> (loss [], kl [N]); gradients in the forward."""

    @staticmethod
    def forward(ctx, hidden, weight, teacher, coef, temperature, tp_group, chunk_size, logits_dtype, grads,
                triton_path):
        need_hidden, need_weight = grads
        teacher_hidden, teacher_weight, teacher_logits = teacher
        head = ChunkedHead(hidden, weight, logits_dtype, chunk_size, triton_path,
                           extra_logits=1 if teacher_logits is None else 0)
        n = hidden.shape[0]
        kl = hidden.new_empty(n, dtype=torch.float32)
        loss = hidden.new_zeros((), dtype=torch.float32)
        grad_hidden, grad_weight = head.new_grads(need_hidden, need_weight)
        inv_temp = 1.0 / temperature
        for start, end in head.chunks():
            student = head.logits(start, end)
            if teacher_logits is None:
                teacher_chunk = head.logits(start, end, teacher_hidden, teacher_weight, slot=1)
            else:
                teacher_chunk = teacher_logits[start:end]
            lse_s, lse_t, kl_chunk = rkl_stats(student, teacher_chunk, temperature, tp_group, triton_path)
            kl[start:end] = kl_chunk
            loss += (coef[start:end] * kl_chunk).sum()
            if need_hidden or need_weight:
                grad_logits = head.grad_target(student)
                rkl_grad_(student, teacher_chunk, grad_logits, lse_s, lse_t, kl_chunk,
                          (coef[start:end] * inv_temp).contiguous(), inv_temp, triton_path)
                head.backprop(grad_logits, start, end, grad_hidden, grad_weight)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.mark_non_differentiable(kl)
        return loss, kl

    @staticmethod
    def backward(ctx, grad_loss, _grad_kl):
        return scale_saved_grads(grad_loss, *ctx.saved_tensors) + (None,) * 8


def _check_teacher(hidden, weight, teacher_hidden, teacher_weight, teacher_logits):
    n, v_local = hidden.shape[0], weight.shape[0]
    if teacher_logits is not None:
        if teacher_hidden is not None or teacher_weight is not None:
            raise ValueError("pass either teacher_logits or teacher_hidden + teacher_weight, not both")
        if teacher_logits.shape != (n, v_local):
            raise ValueError(
                f"teacher_logits must be [N, V_local] = ({n}, {v_local}), got {tuple(teacher_logits.shape)}"
            )
        if teacher_logits.stride(1) != 1:
            raise ValueError("teacher_logits must have a unit stride along the vocab")
        return
    if teacher_hidden is None or teacher_weight is None:
        raise ValueError("pass teacher_hidden and teacher_weight (or teacher_logits)")
    if teacher_hidden.dim() != 2 or teacher_hidden.shape[0] != n:
        raise ValueError(f"teacher_hidden must be [N, D_teacher] with N = {n}, got {tuple(teacher_hidden.shape)}")
    if teacher_weight.shape != (v_local, teacher_hidden.shape[1]):
        raise ValueError(
            f"teacher_weight must be [V_local, D_teacher] = ({v_local}, {teacher_hidden.shape[1]}) (the same "
            f"vocab shard as the student's), got {tuple(teacher_weight.shape)}"
        )
    if teacher_weight.dtype != teacher_hidden.dtype:
        raise ValueError(f"teacher_weight dtype {teacher_weight.dtype} differs from teacher_hidden's")


def fused_reverse_kl(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    response_ids: torch.Tensor,
    response_weights: torch.Tensor,
    *,
    teacher_hidden: torch.Tensor | None = None,
    teacher_weight: torch.Tensor | None = None,
    teacher_logits: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    num_responses: int | torch.Tensor | None = None,
    temperature: float = 1.0,
    tp_group=None,
    chunk_size: int | None = None,
    logits_dtype: torch.dtype | None = torch.float32,
) -> ReverseKLOutput:
    """Response-mean, per-domain-weighted full-vocab KL(student || teacher) with both heads fused in.

    Args:
        hidden, weight: the student's ``[N, D]`` hidden states and ``[V_local, D]`` head shard.
        response_ids: ``[N]`` index of each token's response in ``response_weights``.
        response_weights: ``[R]`` per-response weight (w_d of the response's domain).
        teacher_hidden, teacher_weight: the teacher's ``[N, D_T]`` hidden states and ``[V_local, D_T]`` head
            shard over the same vocab shard; or ``teacher_logits`` ``[N, V_local]`` of that shard.
        mask: ``[N]`` bool, true for tokens that count (default: all).
        num_responses: responses in the whole optimizer batch over all data-parallel ranks (default R).
        temperature: both distributions use logits / temperature.
        tp_group, chunk_size: as in ``fused_linear_logprob``.
        logits_dtype: dtype of the chunk logits (default float32, see the module docstring).

    Returns ``ReverseKLOutput(loss, kl)``; only the student gets gradients, grad_hidden being this rank's
    partial sum over its vocab shard.
    """
    _check_teacher(hidden, weight, teacher_hidden, teacher_weight, teacher_logits)
    if response_weights.dim() != 1:
        raise ValueError(f"response_weights must be [R], got shape {tuple(response_weights.shape)}")
    check_lm_head_inputs(hidden, weight, {"response_ids": response_ids, "mask": mask}, temperature)
    mask = None if mask is None else mask.to(torch.bool)
    coef, ids, ids_bad = response_token_weights(response_ids, mask, response_weights.shape[0], num_responses)
    if bool(ids_bad):
        raise ValueError("response_ids: a valid token names a response outside [0, len(response_weights))")
    coef = coef * response_weights.to(device=hidden.device, dtype=torch.float32)[ids]
    grad_enabled = torch.is_grad_enabled()
    grads = (grad_enabled and hidden.requires_grad, grad_enabled and weight.requires_grad)
    teacher = tuple(None if t is None else t.detach() for t in (teacher_hidden, teacher_weight, teacher_logits))
    loss, kl = _FusedReverseKLFunction.apply(
        hidden, weight, teacher, coef, float(temperature), tp_group, chunk_size, logits_dtype, grads,
        use_triton(hidden.device),
    )
    return ReverseKLOutput(loss, kl)
