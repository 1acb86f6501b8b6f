"""Per-domain sufficient statistics of the DN scale statistic r = teacher_logp - rollout_logp, in one pass.

For responses b (rows) of domain d = domain_ids[b] and valid tokens (mask true):

    stats[0, d] = number of responses            stats[2, d] = sum_t r_bt
    stats[1, d] = number of valid tokens         stats[3, d] = sum_t r_bt^2

in float64, the unit of exchange of ``dnmopd.core.statistics`` (rows: responses, tokens, sum, sumsq): the
trainer sums it over data-parallel ranks and hands it to ``DomainNormalizer.from_statistics``.
``_domain_stats_kernel`` reads each row once (one program
per response), zeroes masked positions before the float64 conversion (so padding may hold NaN/inf), and
counts non-finite values at valid positions; ``_domain_stats_native`` is its torch twin, run wherever
``utils.use_triton`` says so (by default on every non-CUDA tensor). The per-row results are summed per domain
by a float64 one-hot matmul (deterministic, unlike atomics). A response with no valid token still counts as
a response.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .utils import next_power_of_2, use_triton


@triton.jit
def _domain_stats_kernel(
    x_ptr, stride_x, mask_ptr, stride_mask, row_stats_ptr, nonfinite_ptr, n_cols, BLOCK_T: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    count = 0
    nonfinite = 0
    total = tl.zeros((), dtype=tl.float64)
    total_sq = tl.zeros((), dtype=tl.float64)
    for start in range(0, n_cols, BLOCK_T):
        cols = start + tl.arange(0, BLOCK_T)
        in_row = cols < n_cols
        valid = tl.load(mask_ptr + row * stride_mask + cols, mask=in_row, other=0) != 0
        x = tl.load(x_ptr + row * stride_x + cols, mask=in_row, other=0.0)
        x = tl.where(valid, x, 0.0).to(tl.float64)
        finite = tl.abs(x) < float("inf")
        count += tl.sum(valid.to(tl.int32), 0)
        nonfinite += tl.sum((~finite).to(tl.int32), 0)
        x = tl.where(finite, x, 0.0)
        total += tl.sum(x, 0)
        total_sq += tl.sum(x * x, 0)
    out = row_stats_ptr + row * 4
    tl.store(out + 0, 1.0)
    tl.store(out + 1, count.to(tl.float64))
    tl.store(out + 2, total)
    tl.store(out + 3, total_sq)
    tl.store(nonfinite_ptr + row, nonfinite)


def _domain_stats_native(log_ratio: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``_domain_stats_kernel`` in torch: per-row (1, count, sum, sumsq) float64 and non-finite counts."""
    x = torch.where(valid, log_ratio, 0.0).to(torch.float64)
    finite = torch.isfinite(x)
    x = torch.where(finite, x, 0.0)
    ones = torch.ones(x.shape[0], dtype=torch.float64, device=x.device)
    row_stats = torch.stack([ones, valid.sum(dim=1).to(torch.float64), x.sum(dim=1), (x * x).sum(dim=1)], dim=1)
    return row_stats, (~finite).sum(dim=1)


def domain_stats(log_ratio: torch.Tensor, mask: torch.Tensor, domain_ids: torch.Tensor,
                 num_domains: int) -> torch.Tensor:
    """``(4, num_domains)`` float64 rows (responses, tokens, sum, sumsq) of ``log_ratio`` over valid tokens.

    Args:
        log_ratio: ``[B, T]`` float tensor, one response per row (any value where ``mask`` is false).
        mask: ``[B, T]`` bool, true at the response's valid tokens.
        domain_ids: ``[B]`` integer domain of each response, in ``[0, num_domains)``.
        num_domains: number of domains D >= 1.

    Raises ValueError on shape errors, an out-of-range domain id, or a non-finite value at a valid token
    (one host sync for the last two).
    """
    if log_ratio.dim() != 2:
        raise ValueError(f"log_ratio must be [B, T], got shape {tuple(log_ratio.shape)}")
    if mask.shape != log_ratio.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} != log_ratio shape {tuple(log_ratio.shape)}")
    rows, n_cols = log_ratio.shape
    if domain_ids.shape != (rows,):
        raise ValueError(f"domain_ids must be [B] = ({rows},), got {tuple(domain_ids.shape)}")
    if num_domains < 1:
        raise ValueError(f"num_domains must be >= 1, got {num_domains}")
    if not log_ratio.is_floating_point():
        raise ValueError(f"log_ratio must be a float tensor, got {log_ratio.dtype}")
    device = log_ratio.device
    valid = mask if mask.dtype == torch.bool else mask != 0
    if rows and n_cols and not use_triton(device):
        row_stats, nonfinite = _domain_stats_native(log_ratio, valid)
    else:
        row_stats = torch.zeros((rows, 4), dtype=torch.float64, device=device)
        row_stats[:, 0] = 1.0  # what the kernel writes first; all of it when T = 0
        nonfinite = torch.zeros(rows, dtype=torch.int32, device=device)
        if rows and n_cols:
            log_ratio = log_ratio if log_ratio.stride(1) == 1 else log_ratio.contiguous()
            mask_u8 = valid.contiguous().view(torch.uint8)
            block = min(4096, next_power_of_2(n_cols))
            _domain_stats_kernel[(rows,)](
                log_ratio, log_ratio.stride(0), mask_u8, mask_u8.stride(0), row_stats, nonfinite, n_cols,
                BLOCK_T=block, num_warps=4,
            )
    bad_ids = (domain_ids < 0) | (domain_ids >= num_domains)
    if rows and bool(bad_ids.any() | (nonfinite != 0).any()):
        _raise_invalid(log_ratio, valid, domain_ids, bad_ids, num_domains)
    one_hot = torch.nn.functional.one_hot(domain_ids.to(device=device, dtype=torch.int64), num_domains)
    return row_stats.t() @ one_hot.to(torch.float64)


def _raise_invalid(log_ratio, valid, domain_ids, bad_ids, num_domains: int) -> None:
    """The error of an invalid batch, naming the first offending response (and token); only runs on error."""
    if bool(bad_ids.any()):
        row = int(bad_ids.nonzero()[0, 0])
        raise ValueError(f"domain_ids: response {row} has domain id {int(domain_ids[row])}, "
                         f"every id must lie in [0, {num_domains})")
    response, token = (int(i) for i in (valid & ~torch.isfinite(log_ratio)).nonzero()[0])
    raise ValueError(f"log_ratio is not finite at valid position (response, token) = ({response}, {token}): "
                     f"{float(log_ratio[response, token])}")
