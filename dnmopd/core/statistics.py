"""Per-domain sufficient statistics of the DN scale statistic r = log p_teacher - log p_rollout.

The unit of exchange is a float64 tensor of shape (4, D): one column per domain, rows
(responses, tokens, sum r, sum r^2). Sums of these tensors are exact to float64 rounding, so statistics
measured on shards and summed (across data-parallel ranks, micro-batches or processes) equal the
statistics of the concatenated batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import torch
import torch.distributed as dist

STAT_ROWS = ("responses", "tokens", "sum", "sumsq")
RESPONSES, TOKENS, SUM, SUMSQ = range(4)

# A spread below 1e-6 of the RMS is indistinguishable from float64 cancellation error: treat it as constant.
ZERO_VARIANCE_RTOL = 1e-12

Sync = bool | dist.ProcessGroup | Callable[[torch.Tensor], torch.Tensor] | None


def empty_statistics(num_domains: int, device: torch.device | str = "cpu") -> torch.Tensor:
    return torch.zeros(len(STAT_ROWS), num_domains, dtype=torch.float64, device=device)


def batch_statistics(
    log_ratio: torch.Tensor, mask: torch.Tensor, domain_ids: torch.Tensor, num_domains: int
) -> torch.Tensor:
    """Statistics of a padded batch.

    log_ratio: (B, T) r per token; positions where ``mask`` is false may hold anything (NaN, inf).
    mask: (B, T) bool, true at valid response tokens.
    domain_ids: (B,) integer domain index of each response, in [0, num_domains).
    Returns float64 (4, num_domains) on log_ratio's device. A response with no valid token still counts
    as a response of its domain.
    """
    if log_ratio.dim() != 2:
        raise ValueError(f"log_ratio must be 2-D (B, T), got shape {tuple(log_ratio.shape)}")
    if mask.shape != log_ratio.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} != log_ratio shape {tuple(log_ratio.shape)}")
    batch = log_ratio.shape[0]
    if domain_ids.shape != (batch,):
        raise ValueError(f"domain_ids must have shape ({batch},), got {tuple(domain_ids.shape)}")
    if num_domains < 1:
        raise ValueError(f"num_domains must be >= 1, got {num_domains}")
    if batch and (int(domain_ids.min()) < 0 or int(domain_ids.max()) >= num_domains):
        raise ValueError(f"domain_ids must lie in [0, {num_domains}), got {domain_ids.tolist()}")
    mask = mask.bool()
    values = torch.where(mask, log_ratio, torch.zeros((), dtype=log_ratio.dtype, device=log_ratio.device))
    values = values.to(torch.float64)
    if not torch.isfinite(values).all():
        bad = (~torch.isfinite(values)).nonzero()[0].tolist()
        raise ValueError(f"log_ratio is not finite at valid position (response, token) = {tuple(bad)}")
    per_response = torch.stack(
        [torch.ones(batch, dtype=torch.float64, device=values.device), mask.sum(1).to(torch.float64),
         values.sum(1), (values * values).sum(1)]
    )
    stats = empty_statistics(num_domains, values.device)
    return stats.index_add_(1, domain_ids.to(device=values.device, dtype=torch.long), per_response)


def list_statistics(pairs: Iterable[tuple[str, torch.Tensor]], domains: Sequence[str]) -> torch.Tensor:
    """Statistics of ragged responses given as (domain, 1-D tensor of the response's valid-token r)."""
    index = {d: i for i, d in enumerate(domains)}
    stats: torch.Tensor | None = None
    for position, (domain, values) in enumerate(pairs):
        if domain not in index:
            raise ValueError(f"response {position}: unknown domain {domain!r}; known domains: {list(domains)}")
        values = values.detach().reshape(-1).to(torch.float64)
        if stats is None:
            stats = empty_statistics(len(domains), values.device)
        column = stats[:, index[domain]]
        total, total_sq = values.sum(), (values * values).sum()
        if not (torch.isfinite(total) and torch.isfinite(total_sq)):
            raise ValueError(f"response {position} ({domain}): log-ratios are not finite")
        column += torch.stack([torch.ones_like(total), torch.full_like(total, values.numel()), total, total_sq])
    return stats if stats is not None else empty_statistics(len(domains))


def population_std(count: float, total: float, total_sq: float) -> float:
    """Population std (divide by N) from sufficient statistics; 0 when fewer than two observations or when
    the variance is below float64 cancellation error."""
    if count < 2:
        return 0.0
    mean_sq = total_sq / count
    variance = mean_sq - (total / count) ** 2
    if variance <= ZERO_VARIANCE_RTOL * mean_sq:
        return 0.0
    return math.sqrt(variance)


def merge_statistics(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """Sum statistics gathered from several shards (e.g. by a single controller)."""
    if not parts:
        raise ValueError("merge_statistics needs at least one statistics tensor")
    shape = parts[0].shape
    for i, part in enumerate(parts):
        if part.shape != shape:
            raise ValueError(f"statistics {i} has shape {tuple(part.shape)}, expected {tuple(shape)}")
    return torch.stack([p.to(torch.float64) for p in parts]).sum(0)


def world_size(group: dist.ProcessGroup | None = None) -> int:
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size(group)


def all_reduce_statistics(stats: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sum statistics over a process group (None: the default group). Identity (the same object) when there is
    no group to reduce over. NCCL only reduces CUDA tensors, so CPU statistics travel through the current
    CUDA device there and come back."""
    if world_size(group) == 1:
        return stats
    reduced = stats.clone()
    if dist.get_backend(group) == "nccl" and not reduced.is_cuda:
        reduced = reduced.to(torch.device("cuda", torch.cuda.current_device()))
    dist.all_reduce(reduced, op=dist.ReduceOp.SUM, group=group)
    return reduced.to(stats.device)


def reduce_statistics(stats: torch.Tensor, sync: Sync) -> torch.Tensor:
    """Apply the caller's reduction: None/False (local), True (default process group), a process group, or a
    callable that maps local statistics to global statistics of the same shape."""
    if sync is None or sync is False:
        return stats
    if sync is True:
        return all_reduce_statistics(stats)
    if isinstance(sync, dist.ProcessGroup):
        return all_reduce_statistics(stats, sync)
    reduced = sync(stats)
    if not isinstance(reduced, torch.Tensor) or reduced.shape != stats.shape:
        got = tuple(reduced.shape) if isinstance(reduced, torch.Tensor) else type(reduced).__name__
        raise ValueError(f"sync callable must return a tensor of shape {tuple(stats.shape)}, got {got}")
    return reduced.to(torch.float64)


def validate_sync(sync: object) -> None:
    if sync is None or isinstance(sync, bool | dist.ProcessGroup) or callable(sync):
        return
    raise TypeError(
        f"sync must be None, a bool, a torch.distributed.ProcessGroup or a callable, got {type(sync).__name__}"
    )
