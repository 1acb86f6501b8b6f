"""Shared batch builders for the core tests, and the trainer's statistics path: the kernel op `domain_stats`
of a padded batch, then `DomainNormalizer.from_statistics`."""

import torch

from dnmopd.core import DomainNormalizer
from dnmopd.kernels import domain_stats

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


def padded(pairs):
    """(domain, valid-token values) pairs as a padded float64 batch with NaN padding: the inverse of `ragged`."""
    length = max((len(values) for _, values in pairs), default=0)
    log_ratio = torch.full((len(pairs), length), float("nan"), dtype=torch.float64)
    mask = torch.zeros(len(pairs), length, dtype=torch.bool)
    for i, (_, values) in enumerate(pairs):
        log_ratio[i, : len(values)] = values
        mask[i, : len(values)] = True
    return log_ratio, mask, torch.tensor([DOMAINS.index(d) for d, _ in pairs], dtype=torch.long)


def as_lists(pairs):
    return [(d, [float(v) for v in values.double()]) for d, values in pairs]


def statistics(log_ratio, mask, domain_ids):
    return domain_stats(log_ratio, mask, domain_ids, len(DOMAINS))


def multipliers(batch, normalizer: DomainNormalizer | None = None):
    """(applied multiplier per domain in DOMAINS order, diagnostics) of a padded batch."""
    normalizer = normalizer or DomainNormalizer(DOMAINS)
    return normalizer.from_statistics(statistics(*batch))


def present(weights, diagnostics) -> dict[str, float]:
    """The multipliers of the domains with at least one response in the batch."""
    return {d: w for d, w in zip(DOMAINS, weights, strict=True) if diagnostics.domains[d].responses > 0}
