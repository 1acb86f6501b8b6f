"""Gated delta rule: chunked form vs recurrent form vs Hugging Face's reference, values and gradients; packed
sequences vs each sequence on its own."""

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

# packed sequences: one token, exactly one and two 64-token chunks, chunk-crossing and short ones
LENGTHS = [5, 64, 1, 130, 33, 128, 2]


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


def _each_alone(fn, tensors, lengths):
    """fn on every sequence of the packed tensors separately, concatenated back along T."""
    pieces = zip(*(t.split(lengths, dim=1) for t in tensors), strict=True)
    return torch.cat([fn(*piece) for piece in pieces], dim=1)


@pytest.mark.parametrize("chunk_size", [1, 16, 64])
def test_packed_sequences_restart_the_state(chunk_size):
    tensors = _inputs(batch=1, length=sum(LENGTHS), seed=3)
    expected = _each_alone(recurrent_gated_delta_rule, tensors, LENGTHS)
    chunked = chunk_gated_delta_rule(*tensors, chunk_size=chunk_size, lengths=LENGTHS)
    recurrent = recurrent_gated_delta_rule(*tensors, lengths=LENGTHS)
    torch.testing.assert_close(recurrent, expected, rtol=0, atol=0)
    torch.testing.assert_close(chunked, expected, rtol=0, atol=2e-6)
    # without the restart every sequence after the first would see its predecessors' state
    assert (chunk_gated_delta_rule(*tensors, chunk_size=chunk_size) - expected).abs().max() > 1e-2


def test_packed_gradients_equal_each_sequence_alone():
    lengths = [40, 3, 70]
    tensors = _inputs(batch=1, length=sum(lengths), seed=4, requires_grad=True)
    weights = torch.randn(tensors[2].shape, generator=torch.Generator().manual_seed(1))
    packed = torch.autograd.grad((chunk_gated_delta_rule(*tensors, chunk_size=16, lengths=lengths) * weights).sum(),
                                 tensors)
    alone = torch.autograd.grad((_each_alone(recurrent_gated_delta_rule, tensors, lengths) * weights).sum(), tensors)
    for got, expected in zip(packed, alone, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=5e-6)


def test_packed_entry_point_matches_padded_rows():
    """``gated_delta_rule`` (grouped heads) on a packed row equals it on right-padded rows, row by row."""
    lengths = [70, 9, 64]
    gen = torch.Generator().manual_seed(5)
    q, k = torch.randn(1, sum(lengths), 2, 16, generator=gen), torch.randn(1, sum(lengths), 2, 16, generator=gen)
    v = torch.randn(1, sum(lengths), 4, 8, generator=gen)
    g, beta = -2 * torch.rand(1, sum(lengths), 4, generator=gen), torch.rand(1, sum(lengths), 4, generator=gen)
    packed = gated_delta_rule(q, k, v, g, beta, backend="torch", lengths=lengths)
    starts = torch.tensor([0, *lengths]).cumsum(0)[:-1].tolist()

    def rows(t):  # [1, T, ...] -> right-padded [sequences, longest, ...]
        pieces = [t[0, start:start + n] for start, n in zip(starts, lengths, strict=True)]
        return torch.nn.utils.rnn.pad_sequence(pieces, batch_first=True)

    out = gated_delta_rule(*(rows(t) for t in (q, k, v, g, beta)), backend="torch")
    expected = torch.cat([out[i, :n] for i, n in enumerate(lengths)])[None]
    torch.testing.assert_close(packed, expected, rtol=0, atol=2e-6)


def test_packed_lengths_must_cover_one_row():
    tensors = _inputs(batch=1, length=10)
    for lengths in ([4, 5], [10, 0], [11]):
        with pytest.raises(ValueError, match="packed sequence lengths"):
            chunk_gated_delta_rule(*tensors, lengths=lengths)
    with pytest.raises(ValueError, match="single row"):
        chunk_gated_delta_rule(*_inputs(batch=2, length=5), lengths=[5, 5])
