"""Shared batch builders for the core tests."""

import torch

DOMAINS = ("math", "code", "ifeval")
SPREADS = {"math": 0.3, "code": 1.0, "ifeval": 3.0}


def make_batch(seed: int, batch: int = 24, length: int = 16, offsets=(0.0, 0.0, 0.0), spreads=SPREADS,
               empty_every: int = 0):
    """A padded batch with domains cycling math/code/ifeval, per-domain spreads, random valid lengths
    (some responses empty when empty_every > 0), and NaN/inf in the padding."""
    g = torch.Generator().manual_seed(seed)
    domain_ids = torch.arange(batch) % len(DOMAINS)
    scale = torch.tensor([spreads[d] for d in DOMAINS])[domain_ids][:, None]
    offset = torch.tensor(offsets, dtype=torch.float64)[domain_ids][:, None]
    log_ratio = (torch.randn(batch, length, generator=g, dtype=torch.float64) * scale + offset).float()
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    if empty_every:
        lengths[::empty_every] = 0
    mask = torch.arange(length)[None, :] < lengths[:, None]
    padding = torch.tensor([float("nan"), float("inf"), -float("inf")])
    log_ratio = torch.where(mask, log_ratio, padding[torch.arange(length) % 3][None, :].expand(batch, -1))
    return log_ratio, mask, domain_ids


def ragged(log_ratio, mask, domain_ids):
    """The same batch as (domain, valid-token tensor) pairs."""
    return [(DOMAINS[int(d)], log_ratio[i][mask[i]]) for i, d in enumerate(domain_ids)]


def as_lists(pairs):
    return [(d, [float(v) for v in values.double()]) for d, values in pairs]

