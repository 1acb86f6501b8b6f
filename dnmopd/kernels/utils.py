"""Host-side helpers shared by the fused LM-head ops.

Everything here runs on the host or as a handful of small torch ops on per-token vectors; the Triton
kernels and their native twins live in the op files. Conventions used by every op:

- hidden ``[N, D]`` rows are tokens; ``weight`` ``[V_local, D]`` is this rank's contiguous vocab shard,
  starting at global column ``vocab_start``.
- Work runs in token chunks so that at most one ``[chunk, V_local]`` logits buffer (plus a gradient
  buffer when its dtype differs) exists at a time; ``chunk_rows`` sizes the chunk from a byte budget.
- Per-token statistics of each rank are packed into one ``[chunk, k]`` float32 tensor and exchanged with
  one all-gather per chunk (``gather_token_stats``); every rank then merges them identically.
- Each op has two implementations of its per-row passes over the logits: Triton kernels (CUDA) and
  native torch ops (every other device); ``use_triton`` picks one per call. Everything else (chunking,
  GEMMs, the TP exchange and merge) is shared by both.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager

import torch
import torch.distributed as dist

# Default byte budget for the per-chunk [chunk, V_local] buffers, i.e. most of the extra peak memory.
# Measured on an H200 (docs/benchmarks.md): 2048-token chunks of the 248,320-row head (0.95 GiB) ran the
# fused OPD step at 1.062x the 3-GEMM floor against 1.086x for 1024-token chunks, so the budget is as large
# as the 1 GiB target allows: 2048 rows at V_local = 248,320, 16,384 rows at V_local = 31,040.
DEFAULT_CHUNK_BYTES = 976 * 2**20
# The native path's budget. Its passes add about two float32 temporaries of the chunk's size. Measured on
# 2 shared CPU cores (docs/benchmarks.md), 4096 x 1024 x 32000 float32: chunks of 128 to 4096 rows took the
# same time within the noise, and the peak extra memory grows with the chunk (0.09 GiB at 256 rows, 0.36 at
# 1024, 1.33 at 4096, as much as plain torch), so the budget is small: 512 rows at V_local = 32,000, one
# chunk for the demo's 1,024-row head.
NATIVE_CHUNK_BYTES = 64 * 2**20

# Which implementation of the per-row passes runs: "auto" (Triton on CUDA tensors, native elsewhere),
# "native" (plain torch on any device) or "triton" (any device; on CPU only under the Triton interpreter).
BACKEND_ENV = "DNMOPD_KERNEL_BACKEND"
BACKENDS = ("auto", "native", "triton")
# Triton decides at decoration time (when the op modules import, right after this one) whether its
# kernels are interpreted; read the same switch the same way here.
TRITON_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on")


def use_triton(device: torch.device) -> bool:
    """True to run the Triton kernels on tensors of ``device``, False for the native torch path."""
    choice = os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    if choice not in BACKENDS:
        raise ValueError(f"{BACKEND_ENV}={os.environ[BACKEND_ENV]!r}: expected one of {', '.join(BACKENDS)}")
    if choice == "native":
        return False
    if device.type == "cuda":
        return True
    if choice == "auto":
        return False
    if not TRITON_INTERPRETED:
        raise ValueError(
            f"{BACKEND_ENV}=triton on {device.type} tensors needs the Triton interpreter: set TRITON_INTERPRET=1 "
            "before dnmopd.kernels is imported"
        )
    return True


def next_power_of_2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def vocab_block(n_cols: int) -> tuple[int, int]:
    """Block width over the vocab and warps per program for the row kernels."""
    block = min(4096, next_power_of_2(max(n_cols, 16)))
    return block, (8 if block >= 2048 else 4)


@contextmanager
def kernel_backend(name: str):
    """Run the ops called inside on one backend (sets ``DNMOPD_KERNEL_BACKEND``; restores it on exit)."""
    if name not in BACKENDS:
        raise ValueError(f"kernel_backend: expected one of {', '.join(BACKENDS)}, got {name!r}")
    previous = os.environ.get(BACKEND_ENV)
    os.environ[BACKEND_ENV] = name
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(BACKEND_ENV, None)
        else:
            os.environ[BACKEND_ENV] = previous


def chunk_budget(triton_path: bool) -> int:
    """Default byte budget of one chunk's logits/gradient buffers on the Triton or the native path."""
    return DEFAULT_CHUNK_BYTES if triton_path else NATIVE_CHUNK_BYTES


def chunk_rows(n_rows: int, n_cols: int, bytes_per_elem: int, chunk_size: int | None,
               budget_bytes: int = DEFAULT_CHUNK_BYTES) -> int:
    """Token rows per chunk: ``chunk_size`` if given, else the budget over one row's buffers."""
    if chunk_size is not None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        return min(chunk_size, max(n_rows, 1))
    rows = budget_bytes // max(1, n_cols * bytes_per_elem)
    rows = max(256, rows // 256 * 256)
    return min(rows, max(n_rows, 1))


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out = a @ b`` in out's dtype; bf16/fp16 operands with a float32 ``out`` use cuBLAS's fp32 output
    (``torch.mm(..., out_dtype=float32)``, torch >= 2.8) and otherwise an upcast fp32 product."""
    if out.dtype == a.dtype:
        return torch.mm(a, b, out=out)
    if a.is_cuda and out.dtype == torch.float32 and _MM_HAS_OUT_DTYPE:
        return torch.mm(a, b, out_dtype=torch.float32, out=out)
    return torch.mm(a.to(out.dtype), b.to(out.dtype), out=out)


_MM_HAS_OUT_DTYPE = hasattr(torch.ops.aten.mm, "dtype_out")


def scaled_float32(logits: torch.Tensor, inv_temp: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Logits as float32 times 1 / temperature, for the native passes (no copy for float32 at temperature 1).

    With ``out`` (where the caller's result goes) the tensor returned is the caller's to overwrite: the logits
    themselves only if ``out`` is them, else a copy."""
    scaled = logits.to(torch.float32)
    scaled = scaled if inv_temp == 1.0 else scaled * inv_temp
    if out is not None and scaled.data_ptr() == logits.data_ptr() and out.data_ptr() != logits.data_ptr():
        scaled = scaled.clone()
    return scaled


def accumulate_weight_grad(grad_weight: torch.Tensor, grad_logits: torch.Tensor, hidden: torch.Tensor,
                           first: bool) -> None:
    """``grad_weight (+)= grad_logits^T @ hidden``; the first chunk writes, later chunks accumulate."""
    if first:
        torch.mm(grad_logits.t(), hidden, out=grad_weight)
    else:
        grad_weight.addmm_(grad_logits.t(), hidden)


def scale_saved_grads(grad_loss: torch.Tensor, *grads: torch.Tensor | None) -> tuple:
    """Gradients computed in the forward, times the loss's upstream gradient.

    One host sync on the scalar instead of a full extra pass over the weight gradient when it is 1.
    """
    if bool(grad_loss == 1.0):
        return grads
    return tuple(None if g is None else g * grad_loss.to(g.dtype) for g in grads)


def tp_size(group) -> int:
    if group is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size(group)


def gather_token_stats(stats: torch.Tensor, group) -> torch.Tensor:
    """All-gather this rank's packed ``[C, k]`` per-token stats into ``[world, C, k]`` (one collective)."""
    world = tp_size(group)
    if world == 1:
        return stats.unsqueeze(0)
    out = stats.new_empty((world * stats.shape[0], *stats.shape[1:]))
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, stats.contiguous(), group=group)
    return out.view(world, *stats.shape)


def merge_max_sumexp(m: torch.Tensor, sum_exp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Merge per-rank ``(max, sum exp(x - max))`` over dim 0 -> ``(max, sum, per-rank rescale)``."""
    m_all = m.amax(dim=0)
    scale = torch.exp(m - m_all)
    return m_all, (sum_exp * scale).sum(dim=0), scale


def response_token_weights(
    response_ids: torch.Tensor,
    mask: torch.Tensor | None,
    num_local_responses: int,
    num_responses: int | torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token response-mean coefficient and the clamped response index of each token.

    ``coef_t = mask_t / (num_responses * max(n_r, 1))`` where ``n_r`` counts the valid tokens of token t's
    response r, so ``sum_t coef_t * x_t`` is the mean over responses of each response's token mean, with
    ``num_responses`` the response count of the whole (global) batch. Returns ``(coef, ids, bad)``:
    ``bad`` is a 0-dim bool tensor, true when a valid token names a response outside
    ``[0, num_local_responses)`` (checked by the caller with its other validity checks, one sync).
    """
    if mask is None:
        mask = torch.ones_like(response_ids, dtype=torch.bool)
    bad = (mask & ((response_ids < 0) | (response_ids >= num_local_responses))).any()
    ids = response_ids.clamp(0, max(num_local_responses - 1, 0))
    valid = mask.to(torch.float32)
    counts = torch.zeros(num_local_responses, dtype=torch.float32, device=ids.device)
    counts.index_add_(0, ids, valid)
    if num_responses is None:
        num_responses = num_local_responses
    coef = valid / (counts.clamp(min=1.0)[ids] * num_responses)
    return coef, ids, bad


def check_lm_head_inputs(hidden: torch.Tensor, weight: torch.Tensor, per_token: dict[str, torch.Tensor | None],
                         temperature: float) -> None:
    """Shape/dtype checks shared by the ops; errors name the argument and what was expected."""
    if hidden.dim() != 2:
        raise ValueError(f"hidden must be [N, D], got shape {tuple(hidden.shape)}")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[1] or weight.shape[0] == 0:
        raise ValueError(
            f"weight must be [V_local, D] with V_local >= 1 and D = hidden.shape[1] = {hidden.shape[1]}, "
            f"got shape {tuple(weight.shape)}"
        )
    if weight.dtype != hidden.dtype:
        raise ValueError(f"weight dtype {weight.dtype} differs from hidden dtype {hidden.dtype}")
    if weight.device != hidden.device:
        raise ValueError(f"weight is on {weight.device} but hidden is on {hidden.device}")
    n = hidden.shape[0]
    for name, tensor in per_token.items():
        if tensor is None:
            continue
        if tensor.shape != (n,):
            raise ValueError(f"{name} must have shape [N] = ({n},), got {tuple(tensor.shape)}")
        if tensor.device != hidden.device:
            raise ValueError(f"{name} is on {tensor.device} but hidden is on {hidden.device}")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a positive finite number, got {temperature}")


class ChunkedHead:
    """Token-chunk plan for one pass over a vocab shard, with reusable logits/gradient buffers."""

    def __init__(self, hidden: torch.Tensor, weight: torch.Tensor, logits_dtype: torch.dtype | None,
                 chunk_size: int | None, triton_path: bool, extra_logits: int = 0):
        self.hidden, self.weight = hidden, weight
        self.logits_dtype = logits_dtype or hidden.dtype
        n, n_cols = hidden.shape[0], weight.shape[0]
        separate_grad = self.logits_dtype != weight.dtype
        elem = (1 + extra_logits) * self.logits_dtype.itemsize + (weight.itemsize if separate_grad else 0)
        self.rows = chunk_rows(n, n_cols, elem, chunk_size, chunk_budget(triton_path))
        alloc = min(self.rows, max(n, 1))
        self.buffers = [hidden.new_empty((alloc, n_cols), dtype=self.logits_dtype) for _ in range(1 + extra_logits)]
        self.grad_buffer = hidden.new_empty((alloc, n_cols), dtype=weight.dtype) if separate_grad else None

    def chunks(self):
        n = self.hidden.shape[0]
        for start in range(0, n, self.rows):
            yield start, min(start + self.rows, n)

    def logits(self, start: int, end: int, hidden=None, weight=None, slot: int = 0) -> torch.Tensor:
        hidden = self.hidden if hidden is None else hidden
        weight = self.weight if weight is None else weight
        return matmul(hidden[start:end], weight.t(), out=self.buffers[slot][: end - start])

    def grad_target(self, logits: torch.Tensor) -> torch.Tensor:
        """Where dL/dlogits goes: in place, or a buffer in the weight dtype for the GEMMs."""
        return logits if self.grad_buffer is None else self.grad_buffer[: logits.shape[0]]

    def new_grads(self, need_hidden: bool, need_weight: bool):
        """Output gradients; the weight's starts at zero only when no chunk will write it (N = 0)."""
        grad_hidden = torch.empty_like(self.hidden) if need_hidden else None
        empty = self.hidden.shape[0] == 0
        grad_weight = (torch.zeros_like if empty else torch.empty_like)(self.weight) if need_weight else None
        return grad_hidden, grad_weight

    def backprop(self, grad_logits: torch.Tensor, start: int, end: int, grad_hidden: torch.Tensor | None,
                 grad_weight: torch.Tensor | None) -> None:
        if grad_hidden is not None:
            torch.mm(grad_logits, self.weight, out=grad_hidden[start:end])
        if grad_weight is not None:
            accumulate_weight_grad(grad_weight, grad_logits, self.hidden[start:end], first=start == 0)
