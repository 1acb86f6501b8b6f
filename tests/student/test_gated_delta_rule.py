"""Gated delta rule: chunked form vs recurrent form vs Hugging Face's reference, values and gradients."""

from __future__ import annotations

import pytest
import torch

from dnmopd.student.gated_delta_rule import (
    chunk_gated_delta_rule,
    gated_delta_rule,
    l2norm,
    recurrent_gated_delta_rule,
    resolve_backend,
)


def _inputs(batch=2, length=77, heads=3, dk=16, dv=8, seed=0, requires_grad=False):
    gen = torch.Generator().manual_seed(seed)
    q = l2norm(torch.randn(batch, length, heads, dk, generator=gen))
    k = l2norm(torch.randn(batch, length, heads, dk, generator=gen))
    v = torch.randn(batch, length, heads, dv, generator=gen)
    g = -3.0 * torch.rand(batch, length, heads, generator=gen)  # strong and weak decay
    beta = torch.rand(batch, length, heads, generator=gen)
    tensors = [q, k, v, g, beta]
    return [t.requires_grad_(requires_grad) for t in tensors]


@pytest.mark.parametrize("chunk_size", [1, 16, 64, 100])
def test_chunked_equals_recurrent(chunk_size):
    q, k, v, g, beta = _inputs()
    chunked = chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=chunk_size)
    recurrent = recurrent_gated_delta_rule(q, k, v, g, beta)
    assert chunked.shape == v.shape
    torch.testing.assert_close(chunked, recurrent, rtol=0, atol=2e-6)


def test_gradients_of_both_forms_agree():
    tensors = _inputs(length=40, requires_grad=True)
    weights = torch.randn(tensors[2].shape, generator=torch.Generator().manual_seed(1))
    grads = []
    for fn in (lambda *t: chunk_gated_delta_rule(*t, chunk_size=16), recurrent_gated_delta_rule):
        grads.append(torch.autograd.grad((fn(*tensors) * weights).sum(), tensors))
    for chunked, recurrent in zip(*grads, strict=True):
        assert torch.isfinite(chunked).all()
        torch.testing.assert_close(chunked, recurrent, rtol=0, atol=5e-6)


def test_float64_recurrence_reference():
    """The recurrent form matches a direct float64 evaluation of S_t = a S + k u^T, o = S^T q / sqrt(dk)."""
    q, k, v, g, beta = _inputs(batch=1, length=9, heads=1, dk=4, dv=3)
    state = torch.zeros(4, 3, dtype=torch.float64)
    expected = []
    for t in range(9):
        qt, kt, vt = (x[0, t, 0].double() for x in (q, k, v))
        decayed = torch.exp(g[0, t, 0].double()) * state
        state = decayed + torch.outer(kt, beta[0, t, 0].double() * (vt - decayed.T @ kt))
        expected.append(state.T @ qt / 2.0)
    out = recurrent_gated_delta_rule(q, k, v, g, beta)[0, :, 0]
    torch.testing.assert_close(out.double(), torch.stack(expected), rtol=0, atol=1e-6)


def test_matches_hugging_face_reference():
    """``gated_delta_rule`` (normalise + grouped heads + chunked form) vs transformers' torch fallback."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule

    gen = torch.Generator().manual_seed(2)
    q, k = torch.randn(2, 70, 2, 16, generator=gen), torch.randn(2, 70, 2, 16, generator=gen)
    v = torch.randn(2, 70, 4, 8, generator=gen)  # 4 value heads share 2 q/k heads
    g, beta = -2 * torch.rand(2, 70, 4, generator=gen), torch.rand(2, 70, 4, generator=gen)
    ours = gated_delta_rule(q, k, v, g, beta, backend="torch")
    theirs, _ = torch_chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-6)


def test_backend_selection_on_cpu():
    cpu = torch.device("cpu")
    assert resolve_backend("auto", device=cpu, needs_grad=True) == "torch"
    assert resolve_backend("torch", device=cpu, needs_grad=False) == "torch"
    with pytest.raises(RuntimeError, match="needs flash-linear-attention"):
        resolve_backend("fla", device=cpu, needs_grad=False)
    with pytest.raises(ValueError, match="gdn backend"):
        resolve_backend("cuda", device=cpu, needs_grad=False)
