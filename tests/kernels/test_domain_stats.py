"""domain_stats against float64 sums (within 1e-12 relative) and its errors, on both backends."""

import pytest
import torch
from kernel_reference import DEVICE
from kernel_reference import domain_stats as reference_stats

from dnmopd.kernels import domain_stats


def _batch(b, t, num_domains, seed, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    log_ratio = (torch.randn(b, t, generator=gen) * 2 + 0.5).to(dtype)
    mask = torch.rand(b, t, generator=gen) > 0.3
    mask[0] = False  # a response without valid tokens still counts as a response
    log_ratio[~mask] = float("nan")  # padding may hold anything
    log_ratio[~mask & (torch.rand(b, t, generator=gen) > 0.5)] = float("inf")
    ids = torch.randint(0, num_domains, (b,), generator=gen)
    return log_ratio.to(DEVICE), mask.to(DEVICE), ids.to(DEVICE)


@pytest.mark.parametrize("b,t,num_domains,dtype", [(1, 1, 1, torch.float32), (9, 4500, 3, torch.float32),
                                                   (7, 33, 4, torch.bfloat16)])
def test_matches_float64_sums(b, t, num_domains, dtype, backend):
    log_ratio, mask, ids = _batch(b, t, num_domains, seed=b * t, dtype=dtype)
    stats = domain_stats(log_ratio, mask, ids, num_domains)
    ref = reference_stats(log_ratio, mask, ids, num_domains)
    assert stats.dtype == torch.float64 and stats.shape == (4, num_domains)
    torch.testing.assert_close(stats.cpu(), ref, rtol=1e-12, atol=1e-12)


def test_errors_name_the_response_and_token(backend):
    log_ratio, mask, ids = _batch(6, 9, 3, seed=42)
    mask[2, 4] = True
    log_ratio[2, 4] = float("nan")  # the first non-finite value at a valid token
    log_ratio[5, 0], mask[5, 0] = float("inf"), True
    with pytest.raises(ValueError, match=r"not finite at valid position \(response, token\) = \(2, 4\): nan"):
        domain_stats(log_ratio, mask, ids, 3)
    bad = ids.clone()
    bad[3] = -1
    with pytest.raises(ValueError, match=r"response 3 has domain id -1, every id must lie in \[0, 3\)"):
        domain_stats(log_ratio, mask, bad, 3)


def test_invalid_inputs_raise(backend):
    log_ratio, mask, ids = _batch(3, 5, 2, seed=41)
    with pytest.raises(ValueError, match="domain_ids"):
        domain_stats(log_ratio, mask, torch.tensor([0, 2, 1], device=DEVICE), 2)
    bad = log_ratio.clone()
    bad[mask] = float("nan")
    bad[0, 0], mask2 = float("inf"), mask.clone()
    mask2[1, 1] = True
    with pytest.raises(ValueError, match="not finite at valid position"):
        domain_stats(bad, mask2, ids, 2)
    with pytest.raises(ValueError, match="mask shape"):
        domain_stats(log_ratio, mask[:, :4], ids, 2)
    with pytest.raises(ValueError, match="log_ratio must be"):
        domain_stats(log_ratio[0], mask[0], ids, 2)
    with pytest.raises(ValueError, match="domain_ids must be"):
        domain_stats(log_ratio, mask, ids[1:], 2)
