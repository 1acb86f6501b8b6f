"""The rival rule token_share (Open-MOPD's M1): w_d = clip(target share / observed token share), against a float64
count written out here from the raw batch, with both target shares, the bounds, absent domains, and the DN
statistics still measured beside it."""

from fractions import Fraction

import pytest
import torch
from dn_batches import DOMAINS, make_batch, multipliers

from dnmopd.core import DomainNormalizer


def expected(mask, domain_ids, target_share, bounds=(0.25, 4.0)):
    """Exact (rational) clip(target / observed) per domain from the valid-token mask and the response domains."""
    tokens = [Fraction(int(mask[domain_ids == d].sum())) for d in range(len(DOMAINS))]
    responses = [Fraction(int((domain_ids == d).sum())) for d in range(len(DOMAINS))]
    present = sum(1 for n in tokens if n > 0)
    out = []
    for n_tokens, n_responses in zip(tokens, responses, strict=True):
        if n_tokens == 0:
            out.append(1.0)
            continue
        target = n_responses / sum(responses) if target_share == "responses" else Fraction(1, present)
        out.append(min(bounds[1], max(bounds[0], float(target / (n_tokens / sum(tokens))))))
    return out


def skewed_batch(seed, lengths=(16, 6, 2)):
    """math responses long, code medium, IF short (as on the real data), in a padded batch."""
    _, _, domain_ids = make_batch(seed, batch=30, length=16)
    g = torch.Generator().manual_seed(seed)
    log_ratio = torch.randn(30, 16, generator=g)
    cap = torch.tensor(lengths)[domain_ids]
    drawn = torch.minimum(torch.randint(1, 17, (30,), generator=g), cap)
    mask = torch.arange(16)[None, :] < drawn[:, None]
    return log_ratio, mask, domain_ids


@pytest.mark.parametrize("target_share", ["responses", "uniform"])
def test_multipliers_equal_the_share_ratio(target_share):
    batch = skewed_batch(0)
    normalizer = DomainNormalizer(DOMAINS, multipliers="token_share", target_share=target_share)
    weights, diagnostics = multipliers(batch, normalizer)
    ref = expected(batch[1], batch[2], target_share)
    assert weights == pytest.approx(ref, rel=1e-12)
    assert weights[0] < 1 < weights[2]  # long math responses are scaled down, short IF ones up
    assert [diagnostics.domains[d].share_factor for d in DOMAINS] == weights
    _, dn = multipliers(batch)  # the DN factor is measured and reported as under dn
    assert {d: x.factor for d, x in diagnostics.domains.items()} == {d: x.factor for d, x in dn.domains.items()}
    assert diagnostics.to_metrics()["dn/ifeval/share_factor"] == weights[2]


def test_bounds_clip_and_an_absent_domain_gets_one():
    log_ratio, mask, domain_ids = skewed_batch(1, lengths=(16, 16, 1))
    mask[domain_ids == 1] = False  # code responses are there but have no valid token
    normalizer = DomainNormalizer(DOMAINS, multipliers="token_share", bounds=(0.5, 2.0))
    weights, _ = multipliers((log_ratio, mask, domain_ids), normalizer)
    assert weights == pytest.approx(expected(mask, domain_ids, "responses", (0.5, 2.0)), rel=1e-12)
    assert weights[1] == 1.0 and weights[2] == 2.0  # no tokens: degenerate 1; IF's raw ratio is clipped


def test_equal_lengths_give_one_and_other_modes_only_measure():
    _, mask, domain_ids = make_batch(2, batch=12, length=8)
    log_ratio = torch.randn(12, 8, generator=torch.Generator().manual_seed(2))
    mask[:] = True  # every response 8 tokens, 4 per domain: token share = response share
    weights, _ = multipliers((log_ratio, mask, domain_ids), DomainNormalizer(DOMAINS, multipliers="token_share"))
    assert weights == [1.0, 1.0, 1.0]
    observed, diagnostics = multipliers(skewed_batch(3), DomainNormalizer(DOMAINS, multipliers="observe"))
    assert observed == [1.0, 1.0, 1.0] and diagnostics.domains["ifeval"].share_factor > 1


def test_unknown_target_share_is_refused():
    with pytest.raises(ValueError, match="target_share must be one of"):
        DomainNormalizer(DOMAINS, multipliers="token_share", target_share="prompts")
