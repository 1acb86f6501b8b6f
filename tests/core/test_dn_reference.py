"""The normalizer, scaling and loss against the independent float64 oracle and the method's identities."""

import math

import pytest
import torch
from dn_batches import DOMAINS, as_lists, make_batch, ragged
from dn_oracle import multipliers as oracle_multipliers
from dn_oracle import opd_loss as oracle_loss
from dn_oracle import population_std as oracle_std

from dnmopd.core import (
    DomainNormalizer,
    clipped_opd_loss,
    clipped_opd_loss_batched,
    domain_multipliers,
    reverse_kl_advantages,
    scale_advantages,
)


def test_unclipped_domains_match_pooled_spread():
    pairs = ragged(*make_batch(1, spreads={"math": 0.8, "code": 1.0, "ifeval": 1.5}))
    weights, diag = domain_multipliers(pairs)
    for domain in DOMAINS:
        assert not diag.domains[domain].clipped
        scaled = [v * weights[domain] for d, values in as_lists(pairs) if d == domain for v in values]
        assert oracle_std(scaled) == pytest.approx(diag.global_std, rel=1e-9)


def test_clipping_bounds_on_both_sides():
    g = torch.Generator().manual_seed(3)
    pairs = [("math", torch.randn(400, generator=g) * 0.01) for _ in range(4)]
    pairs += [("code", torch.randn(400, generator=g)) for _ in range(4)]
    pairs += [("ifeval", torch.randn(8, generator=g) * 50.0)]
    weights, diag = domain_multipliers(pairs)
    assert weights["math"] == 4.0 and diag.domains["math"].clipped and diag.domains["math"].raw_factor > 4
    assert weights["ifeval"] == 0.25 and diag.domains["ifeval"].clipped
    assert diag.domains["ifeval"].raw_factor < 0.25


def test_degenerate_std_gives_one():
    constant = [("math", torch.full((50,), 0.7)), ("code", torch.randn(50))]
    weights, diag = domain_multipliers(constant)
    assert weights["math"] == 1.0 and diag.domains["math"].std == 0.0
    weights, diag = domain_multipliers([("math", torch.tensor([0.3]))])
    assert weights == {"math": 1.0} and diag.global_std == 0.0


def test_scaling_preserves_sign_and_all_ones_is_label():
    log_ratio, mask, ids = make_batch(2)
    pairs = ragged(log_ratio, mask, ids)
    weights, _ = domain_multipliers(pairs)
    advantages = [values for _, values in pairs]
    domains = [d for d, _ in pairs]
    scaled = scale_advantages(advantages, domains, weights)
    for before, after in zip(advantages, scaled, strict=True):
        assert torch.equal(torch.sign(before), torch.sign(after))
    unit = scale_advantages(advantages, domains, {d: 1.0 for d in DOMAINS})
    assert all(torch.equal(a, b) for a, b in zip(advantages, unit, strict=True))


def test_loss_reduction_is_response_mean():
    logp = [torch.zeros(3), torch.zeros(1)]
    advantages = [torch.ones(3), torch.full((1,), 2.0)]
    loss = clipped_opd_loss(logp, [x.clone() for x in logp], advantages)
    assert float(loss) == pytest.approx(-(1 + 2) / 2)


@pytest.mark.parametrize("seed", range(6))
def test_multipliers_match_oracle(seed):
    log_ratio, mask, ids = make_batch(seed, offsets=(seed - 2.5, 0.5 * seed, -seed), empty_every=5)
    pairs = ragged(log_ratio, mask, ids)
    weights, diag = domain_multipliers(pairs)
    expected, sigma_all = oracle_multipliers(as_lists(pairs))
    assert diag.global_std == pytest.approx(sigma_all, rel=1e-12)
    for domain, (std, raw, factor) in expected.items():
        assert diag.domains[domain].std == pytest.approx(std, rel=1e-12)
        assert diag.domains[domain].raw_factor == pytest.approx(raw, rel=1e-12)
        assert weights[domain] == pytest.approx(factor, rel=1e-12)


@pytest.mark.parametrize("bounds", [(0.5, 2.0), (0.9, 1.1), (0.0, math.inf)])
def test_multipliers_match_oracle_with_other_bounds(bounds):
    pairs = ragged(*make_batch(7))
    weights, _ = DomainNormalizer(mode="dn", bounds=bounds).multipliers(pairs)
    expected, _ = oracle_multipliers(as_lists(pairs), *bounds)
    assert weights == pytest.approx({d: f for d, (_, _, f) in expected.items()}, rel=1e-12)


def test_scaled_loss_and_gradient_match_oracle():
    g = torch.Generator().manual_seed(11)
    log_ratio, mask, ids = make_batch(5)
    weights, _ = DomainNormalizer(DOMAINS).multipliers_batched(log_ratio, mask, ids)
    teacher = torch.randn(log_ratio.shape, generator=g, dtype=torch.float64)
    old = torch.randn(log_ratio.shape, generator=g, dtype=torch.float64) - 2
    logp = (old + 0.3 * torch.randn(log_ratio.shape, generator=g, dtype=torch.float64)).requires_grad_()
    advantages = reverse_kl_advantages(teacher, old, mask) * weights.double()[ids][:, None]
    loss = clipped_opd_loss_batched(logp, old, advantages, mask)
    loss.backward()
    responses = [
        ((logp[i] - old[i])[mask[i]].tolist(), advantages[i][mask[i]].tolist()) for i in range(len(ids))
    ]
    expected, grads = oracle_loss(responses)
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    for i, grad in enumerate(grads):
        assert logp.grad[i][mask[i]].tolist() == pytest.approx(grad, rel=1e-9, abs=1e-15)
        assert torch.all(logp.grad[i][~mask[i]] == 0)
