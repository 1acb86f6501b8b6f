"""The multipliers, from the kernel op's statistics through `from_statistics`, against the independent float64
oracle and the method's identities."""

import math

import pytest
import torch
from dn_batches import DOMAINS, as_lists, make_batch, multipliers, padded, present, ragged
from dn_oracle import multipliers as oracle_multipliers
from dn_oracle import population_std as oracle_std

from dnmopd.core import DomainNormalizer


def test_unclipped_domains_match_pooled_spread():
    pairs = ragged(*make_batch(1, spreads={"math": 0.8, "code": 1.0, "ifeval": 1.5}))
    weights, diag = multipliers(padded(pairs))
    for domain, weight in zip(DOMAINS, weights, strict=True):
        assert not diag.domains[domain].clipped
        scaled = [v * weight for d, values in as_lists(pairs) if d == domain for v in values]
        assert oracle_std(scaled) == pytest.approx(diag.global_std, rel=1e-9)


def test_clipping_bounds_on_both_sides():
    g = torch.Generator().manual_seed(3)
    pairs = [("math", torch.randn(400, generator=g) * 0.01) for _ in range(4)]
    pairs += [("code", torch.randn(400, generator=g)) for _ in range(4)]
    pairs += [("ifeval", torch.randn(8, generator=g) * 50.0)]
    weights, diag = multipliers(padded(pairs))
    assert weights[0] == 4.0 and diag.domains["math"].clipped and diag.domains["math"].raw_factor > 4
    assert weights[2] == 0.25 and diag.domains["ifeval"].clipped
    assert diag.domains["ifeval"].raw_factor < 0.25


def test_degenerate_std_gives_one():
    weights, diag = multipliers(padded([("math", torch.full((50,), 0.7)), ("code", torch.randn(50))]))
    assert weights[0] == 1.0 and diag.domains["math"].std == 0.0
    weights, diag = multipliers(padded([("math", torch.tensor([0.3]))]))
    assert present(weights, diag) == {"math": 1.0} and diag.global_std == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_multipliers_match_oracle(seed):
    batch = make_batch(seed, offsets=(seed - 2.5, 0.5 * seed, -seed), empty_every=5)
    weights, diag = multipliers(batch)
    expected, sigma_all = oracle_multipliers(as_lists(ragged(*batch)))
    assert diag.global_std == pytest.approx(sigma_all, rel=1e-12)
    applied = present(weights, diag)
    for domain, (std, raw, factor) in expected.items():
        assert diag.domains[domain].std == pytest.approx(std, rel=1e-12)
        assert diag.domains[domain].raw_factor == pytest.approx(raw, rel=1e-12)
        assert applied[domain] == pytest.approx(factor, rel=1e-12)


@pytest.mark.parametrize("bounds", [(0.5, 2.0), (0.9, 1.1), (0.0, math.inf)])
def test_multipliers_match_oracle_with_other_bounds(bounds):
    batch = make_batch(7)
    weights, diag = multipliers(batch, DomainNormalizer(DOMAINS, multipliers="dn", bounds=bounds))
    expected, _ = oracle_multipliers(as_lists(ragged(*batch)), *bounds)
    assert present(weights, diag) == pytest.approx({d: f for d, (_, _, f) in expected.items()}, rel=1e-12)
