"""fused_linear_logprob against float64 log-softmax over materialised logits, on both backends."""

import pytest
import torch
from kernel_reference import DEVICE, leaf64, logprob_entropy, random_head, rel_err

from dnmopd.kernels import fused_linear_logprob
from dnmopd.kernels.linear_logprob import LogprobStats, logprob_grad_

# (tokens, hidden, vocab, temperature, chunk_size): N = 1, a vocab over one 4096 block and not a multiple
# of it, vocab smaller than a block, several chunks with a ragged last one.
CASES = [
    (1, 8, 37, 1.0, None),
    (13, 16, 4099, 0.7, 5),
    (9, 24, 1000, 1.3, None),
]


@pytest.mark.parametrize("n,d,v,temperature,chunk", CASES)
def test_logprob_and_entropy_match_float64(n, d, v, temperature, chunk, backend):
    hidden, weight = random_head(n, d, v, seed=n + v)
    targets = torch.randint(0, v, (n,), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    logp, entropy = fused_linear_logprob(hidden, weight, targets, temperature=temperature,
                                         return_entropy=True, chunk_size=chunk)
    h64, w64 = leaf64(hidden), leaf64(weight)
    ref_logp, ref_entropy = logprob_entropy(h64, w64, targets, temperature)
    assert (logp <= 0).all()
    torch.testing.assert_close(logp.double().cpu(), ref_logp.detach().cpu(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy.double().cpu(), ref_entropy.detach().cpu(), rtol=1e-5, atol=1e-5)

    gen = torch.Generator().manual_seed(2)
    up_logp, up_entropy = torch.randn(n, generator=gen).to(DEVICE), torch.randn(n, generator=gen).to(DEVICE)
    (logp * up_logp + entropy * up_entropy).sum().backward()
    (ref_logp * up_logp.double() + ref_entropy * up_entropy.double()).sum().backward()
    assert rel_err(hidden.grad, h64.grad) < 1e-5
    assert rel_err(weight.grad, w64.grad) < 1e-5


def test_logprob_only_upstream_and_no_entropy(backend):
    hidden, weight = random_head(6, 16, 700, seed=3)
    targets = torch.tensor([0, 699, 5, 5, 123, 350], device=DEVICE)
    logp = fused_linear_logprob(hidden, weight, targets, chunk_size=4)
    (logp * torch.arange(1.0, 7.0, device=DEVICE)).sum().backward()
    h64, w64 = leaf64(hidden), leaf64(weight)
    ref, _ = logprob_entropy(h64, w64, targets)
    (ref * torch.arange(1.0, 7.0, dtype=torch.float64, device=DEVICE)).sum().backward()
    assert rel_err(logp, ref) < 1e-6
    assert rel_err(hidden.grad, h64.grad) < 1e-5 and rel_err(weight.grad, w64.grad) < 1e-5


def test_very_negative_and_wide_logits(backend):
    """Logits around -2000 with a spread of ~30: no overflow/underflow, still float64-accurate."""
    hidden, weight = random_head(8, 16, 2500, seed=4, logit_std=30.0, offset=-2000.0)
    targets = torch.randint(0, 2500, (8,), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    logp, entropy = fused_linear_logprob(hidden, weight, targets, return_entropy=True)
    ref_logp, ref_entropy = logprob_entropy(hidden, weight, targets)
    assert torch.isfinite(logp).all() and (logp <= 0).all()
    torch.testing.assert_close(logp.double().cpu(), ref_logp.cpu(), rtol=0, atol=2e-3)
    torch.testing.assert_close(entropy.double().cpu(), ref_entropy.cpu(), rtol=0, atol=2e-3)


def test_logit_gradient_rows_sum_to_zero_and_match_float64(backend):
    """The grad kernel's dL/dlogits equals g * (onehot - p) (plus the entropy term) and sums to 0 per row."""
    gen = torch.Generator().manual_seed(5)
    logits = (torch.randn(5, 300, generator=gen) * 4).to(DEVICE)
    logits[0, 7] = 40.0  # p_target ~ 1: the target entry must not cancel
    targets = torch.tensor([7, 0, 299, 150, 3], device=DEVICE)
    g, g_ent = torch.randn(5, generator=gen).to(DEVICE), torch.randn(5, generator=gen).to(DEVICE)
    log_p = torch.log_softmax(logits.double(), -1)
    p = log_p.exp()
    logp = log_p.gather(1, targets[:, None])[:, 0]
    lse = torch.logsumexp(logits.double(), -1)
    mu = (p * logits.double()).sum(-1)
    centered = (p * (logits.double().gather(1, targets[:, None]) - logits.double())).sum(-1)
    stats = LogprobStats(lse.float(), logp.float(), None, None, mu.float(), centered.float())
    grad = torch.empty_like(logits)
    logprob_grad_(logits, grad, targets, 0, 1.0, stats, g, g_ent, backend == "triton")
    onehot = torch.nn.functional.one_hot(targets, 300).double()
    expected = g.double()[:, None] * (onehot - p) - g_ent.double()[:, None] * p * (logits.double() - mu[:, None])
    torch.testing.assert_close(grad.double(), expected, rtol=1e-5, atol=1e-6)
    assert grad.double().sum(-1).abs().max() < 1e-5
    # target entry of the saturated row: g * (1 - p_y) formed without cancellation
    torch.testing.assert_close(grad[0, 7].double(), expected[0, 7], rtol=1e-3, atol=0)


def test_bf16_inputs_close_to_float64(backend):
    hidden, weight = random_head(16, 32, 3000, seed=6, dtype=torch.bfloat16)
    targets = torch.randint(0, 3000, (16,), generator=torch.Generator().manual_seed(4)).to(DEVICE)
    logp = fused_linear_logprob(hidden, weight, targets)
    logp.sum().backward()
    h64, w64 = leaf64(hidden), leaf64(weight)
    ref, _ = logprob_entropy(h64, w64, targets)
    ref.sum().backward()
    assert logp.dtype == torch.float32 and hidden.grad.dtype == torch.bfloat16
    assert rel_err(logp, ref) < 2e-2
    assert rel_err(hidden.grad, h64.grad) < 2e-2 and rel_err(weight.grad, w64.grad) < 2e-2


def test_fp32_logits_of_bf16_inputs(backend):
    hidden, weight = random_head(8, 32, 1500, seed=7, dtype=torch.bfloat16)
    targets = torch.randint(0, 1500, (8,), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    logp = fused_linear_logprob(hidden, weight, targets, logits_dtype=torch.float32)
    logp.sum().backward()
    h64, w64 = leaf64(hidden), leaf64(weight)
    ref, _ = logprob_entropy(h64, w64, targets)
    ref.sum().backward()
    assert rel_err(logp, ref) < 1e-5
    assert rel_err(weight.grad, w64.grad) < 1e-2


def test_invalid_inputs_raise(backend):
    hidden, weight = random_head(4, 8, 50, seed=8)
    with pytest.raises(ValueError, match="targets"):
        fused_linear_logprob(hidden, weight, torch.tensor([0, 1, 50, 2], device=DEVICE))
    with pytest.raises(ValueError, match="targets must have shape"):
        fused_linear_logprob(hidden, weight, torch.tensor([0, 1], device=DEVICE))
    with pytest.raises(ValueError, match="weight must be"):
        fused_linear_logprob(hidden, weight[:, :4], torch.tensor([0, 1, 2, 3], device=DEVICE))
    with pytest.raises(ValueError, match="temperature"):
        fused_linear_logprob(hidden, weight, torch.tensor([0, 1, 2, 3], device=DEVICE), temperature=0.0)
