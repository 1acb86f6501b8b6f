"""The padded (B, T) API equals the ragged list API; padding is ignored; errors are precise."""

import pytest
import torch
from dn_batches import DOMAINS, make_batch, ragged

from dnmopd.core import (
    DomainNormalizer,
    batch_statistics,
    clipped_opd_loss,
    clipped_opd_loss_batched,
    list_statistics,
    reverse_kl_advantages,
    scale_advantages,
    scale_advantages_batched,
)


@pytest.mark.parametrize("seed", range(3))
def test_batched_equals_list(seed):
    log_ratio, mask, ids = make_batch(seed, empty_every=7)
    weights, diag = DomainNormalizer(DOMAINS).multipliers_batched(log_ratio, mask, ids)
    listed, list_diag = DomainNormalizer(DOMAINS).multipliers(ragged(log_ratio, mask, ids))
    assert weights.dtype == torch.float32 and weights.shape == (3,)
    assert weights.tolist() == pytest.approx([listed[d] for d in DOMAINS], rel=1e-6)
    for d in DOMAINS:
        assert diag.domains[d].std == pytest.approx(list_diag.domains[d].std, rel=1e-12)


def test_statistics_layouts_agree_and_ignore_padding():
    log_ratio, mask, ids = make_batch(4, empty_every=6)
    batched = batch_statistics(log_ratio, mask, ids, 3)
    listed = list_statistics(ragged(log_ratio, mask, ids), DOMAINS)
    assert batched.dtype == torch.float64 and batched.shape == (4, 3)
    assert torch.allclose(batched, listed, rtol=1e-12, atol=1e-12)
    assert batched[0].sum() == len(ids) and batched[1].sum() == mask.sum()


def test_batched_scaling_equals_list_scaling_and_is_detached():
    log_ratio, mask, ids = make_batch(1)
    advantages = torch.where(mask, log_ratio, 0.0).requires_grad_()
    weights = torch.tensor([2.0, 1.0, 0.25])
    scaled = scale_advantages_batched(advantages, ids, weights)
    assert not scaled.requires_grad
    by_domain = dict(zip(DOMAINS, weights.tolist(), strict=True))
    listed = scale_advantages(list(advantages), [DOMAINS[i] for i in ids], by_domain)
    assert torch.equal(scaled, torch.stack(listed))


def test_batched_loss_equals_list_loss_with_empty_responses():
    g = torch.Generator().manual_seed(2)
    log_ratio, mask, ids = make_batch(3, empty_every=4)
    old = torch.randn(mask.shape, generator=g)
    advantages = torch.randn(mask.shape, generator=g)
    logp = (old + 0.2 * torch.randn(mask.shape, generator=g)).requires_grad_()
    batched = clipped_opd_loss_batched(logp, old, advantages, mask)
    (grad_batched,) = torch.autograd.grad(batched, logp)
    rows = [(logp[i][mask[i]], old[i][mask[i]], advantages[i][mask[i]]) for i in range(len(ids))]
    listed = clipped_opd_loss(*map(list, zip(*rows, strict=True)))
    (grad_listed,) = torch.autograd.grad(listed, logp)
    assert batched.item() == pytest.approx(listed.item(), rel=1e-6)
    assert torch.allclose(grad_batched, grad_listed, rtol=1e-6, atol=1e-9)


def test_nan_padding_gives_finite_loss_and_zero_grads_at_padding():
    log_ratio, mask, _ = make_batch(0)
    logp = log_ratio.clone().requires_grad_()  # NaN / inf in the padding
    loss = clipped_opd_loss_batched(logp, torch.where(mask, 0.1, float("nan")), log_ratio, mask)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    assert torch.all(logp.grad[~mask] == 0)


def test_reverse_kl_advantages_mask_and_detach():
    teacher = torch.tensor([[-1.0, float("nan")], [-0.5, -2.0]])
    student = torch.tensor([[-2.0, -1.0], [float("inf"), -1.0]], requires_grad=True)
    valid = torch.tensor([[True, False], [False, True]])
    adv = reverse_kl_advantages(teacher, student, valid)
    assert adv.tolist() == [[1.0, 0.0], [0.0, -1.0]] and not adv.requires_grad
    with pytest.raises(ValueError, match="valid shape"):
        reverse_kl_advantages(teacher, student, valid[0])
    with pytest.raises(ValueError, match="teacher shape"):
        reverse_kl_advantages(teacher, student[0])


def test_batched_api_needs_domains():
    log_ratio, mask, ids = make_batch(0)
    with pytest.raises(ValueError, match="domains registered"):
        DomainNormalizer().multipliers_batched(log_ratio, mask, ids)


def test_domain_id_out_of_range():
    log_ratio, mask, ids = make_batch(0)
    with pytest.raises(ValueError, match=r"domain_ids must lie in \[0, 3\)"):
        batch_statistics(log_ratio, mask, ids + 1, 3)


@pytest.mark.parametrize(
    "change, message",
    [(lambda r, m, i: (r[0], m[0], i), "2-D"), (lambda r, m, i: (r, m[:, 1:], i), "mask shape"),
     (lambda r, m, i: (r, m, i[1:]), "domain_ids must have shape")],
)
def test_shape_errors(change, message):
    with pytest.raises(ValueError, match=message):
        batch_statistics(*change(*make_batch(0)), 3)


def test_nan_at_a_valid_token_is_refused():
    log_ratio, mask, ids = make_batch(0)
    log_ratio[2, 0] = float("nan")
    with pytest.raises(ValueError, match=r"not finite at valid position .* \(2, 0\)"):
        batch_statistics(log_ratio, mask, ids, 3)
    with pytest.raises(ValueError, match="not finite"):
        list_statistics(ragged(log_ratio, mask, ids), DOMAINS)


def test_unknown_domain_in_list_api():
    with pytest.raises(ValueError, match="unknown domain 'poetry'"):
        DomainNormalizer(DOMAINS).multipliers([("poetry", torch.randn(3))])
