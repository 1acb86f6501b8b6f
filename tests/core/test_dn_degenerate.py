"""Degenerate batches: empty, zero-token, single-token, constant, absent or fully masked domains, and large
offsets that would lose precision in float32; statistics from the kernel op, multipliers from
`from_statistics`."""

import pytest
import torch
from dn_batches import DOMAINS, make_batch, multipliers, padded, present

from dnmopd.core import DomainNormalizer


def test_empty_batch():
    weights, diag = multipliers(padded([]))
    assert present(weights, diag) == {} and diag.global_std == 0.0 and diag.global_tokens == 0


def test_zero_token_responses_count_as_present_with_multiplier_one():
    weights, diag = multipliers(padded([("math", torch.empty(0)), ("code", torch.randn(30)),
                                        ("code", torch.randn(30) * 3)]))
    assert present(weights, diag)["math"] == 1.0
    assert diag.domains["math"].responses == 1 and diag.domains["math"].tokens == 0


def test_single_token_domain_gets_one():
    weights, diag = multipliers(padded([("ifeval", torch.tensor([5.0])), ("math", torch.randn(40))]))
    assert present(weights, diag)["ifeval"] == 1.0 and diag.domains["ifeval"].std == 0.0


@pytest.mark.parametrize("value", [0.0, 0.3, -7.25, 1e4])
def test_constant_domain(value):
    weights, diag = multipliers(padded([("math", torch.full((500,), value, dtype=torch.float64)),
                                        ("code", torch.randn(100))]))
    assert diag.domains["math"].std == 0.0 and weights[0] == 1.0


def test_all_tokens_equal_gives_all_ones():
    weights, diag = multipliers(padded([(d, torch.full((20,), 1.5)) for d in DOMAINS]))
    assert weights == [1.0, 1.0, 1.0] and diag.global_std == 0.0


def test_missing_domain_in_padded_batch():
    log_ratio, mask, ids = make_batch(0)
    keep = ids != 2
    batch = log_ratio[keep], mask[keep], ids[keep]
    weights, diag = multipliers(batch)
    assert weights[2] == 1.0 and diag.domains["ifeval"].responses == 0
    assert set(present(weights, diag)) == {"math", "code"}
    observed, _ = multipliers(batch, DomainNormalizer(DOMAINS, multipliers="observe"))
    assert observed == [1.0, 1.0, 1.0]


def test_absent_domain_gets_its_clip_of_one_under_narrow_bounds():
    log_ratio, mask, ids = make_batch(0)
    keep = ids != 2
    weights, _ = multipliers((log_ratio[keep], mask[keep], ids[keep]), DomainNormalizer(DOMAINS, bounds=(1.5, 3.0)))
    assert weights[2] == 1.5


def test_fully_masked_batch():
    log_ratio, mask, ids = make_batch(0)
    weights, diag = multipliers((log_ratio, torch.zeros_like(mask), ids))
    assert weights == [1.0, 1.0, 1.0] and diag.global_tokens == 0


def test_large_offsets_keep_float64_accuracy():
    g = torch.Generator().manual_seed(0)
    math_values = 50.0 + 0.05 * torch.randn(2000, generator=g, dtype=torch.float64)
    code_values = -50.0 + 0.2 * torch.randn(2000, generator=g, dtype=torch.float64)
    weights, diag = multipliers(padded([("math", math_values), ("code", code_values)]))
    assert diag.domains["math"].std == pytest.approx(float(math_values.std(unbiased=False)), rel=1e-6)
    assert diag.domains["code"].std == pytest.approx(float(code_values.std(unbiased=False)), rel=1e-6)
    assert present(weights, diag) == {"math": 4.0, "code": 4.0}


def test_statistics_of_the_wrong_width_are_refused():
    with pytest.raises(ValueError, match=r"shape \(4, 3\)"):
        DomainNormalizer(DOMAINS).from_statistics(torch.zeros(4, 2, dtype=torch.float64))
