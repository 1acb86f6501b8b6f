"""The gated delta rule (Gated DeltaNet's token mixer): pure-torch chunked and recurrent forms, FLA on CUDA.

Per value head, with state ``S`` of shape ``[dk, dv]``, decay ``alpha_t = exp(g_t)`` (``g_t <= 0``) and
write strength ``beta_t`` in ``(0, 1)``::

    S_t = alpha_t S_{t-1} + k_t u_t^T,    u_t = beta_t (v_t - alpha_t S_{t-1}^T k_t)
    o_t = S_t^T (scale * q_t)

Chunked form (chunk of C tokens, state ``S0`` at its start, ``gamma_i = g_1 + ... + g_i`` inside the chunk).
Unrolling the recurrence gives ``u = (I + A)^{-1} (beta V - beta exp(gamma) K S0)`` with the strictly lower
``A_jl = beta_j exp(gamma_j - gamma_l) k_j . k_l``. Hence, with ``W_v = (I + A)^{-1} beta V`` and
``W_k = (I + A)^{-1} beta exp(gamma) K`` (both independent of ``S0``, so computed for all chunks at once)::

    U   = W_v - W_k S0
    O   = exp(gamma) Q S0 + (Q K^T * D) U          D_il = exp(gamma_i - gamma_l) for l <= i, else 0
    S_C = exp(gamma_C) S0 + (K * exp(gamma_C - gamma))^T U

Only the last three lines run sequentially over chunks. Every exponent is <= 0, so nothing overflows.

Packed sequences (``lengths``: several sequences concatenated along T, batch 1): the state restarts at zero
at every sequence start. The chunked form lays each sequence out from a chunk boundary (the gap to the
next boundary stays zero and is never read back), so no chunk mixes two sequences, and runs the recurrence
over "chunk i of every sequence that has one", longest sequences first: a padded batch is the special case
of equal lengths, and the sequential loop is as long as the longest sequence, not the whole pack.

Shapes: ``q, k [B, T, H, dk]``, ``v [B, T, H, dv]``, ``g, beta [B, T, H]`` (q/k already L2-normalised and
repeated to the value heads); output ``[B, T, H, dv]`` in v's dtype. Math runs in float32.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch

try:  # FLA is optional: CUDA only
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as _fla_chunk_gated_delta_rule

    HAVE_FLA = True
except ImportError:
    _fla_chunk_gated_delta_rule = None
    HAVE_FLA = False

BACKENDS = ("auto", "fla", "torch")


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + eps)`` over the last dim, in float32 (FLA's and Hugging Face's definition)."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def sequence_lengths(batch: int, length: int, lengths: Sequence[int] | None) -> list[int]:
    """The sequences of a ``[batch, length]`` input: one per row, or ``lengths`` packed into a single row."""
    if lengths is None:
        return [length] * batch
    lengths = [int(n) for n in lengths]
    if batch != 1 or sum(lengths) != length or min(lengths, default=0) < 1:
        raise ValueError(
            f"packed sequence lengths must be >= 1 and sum to the length of a single row; got {len(lengths)} "
            f"lengths summing to {sum(lengths)} for input [{batch}, {length}]"
        )
    return lengths


def recurrent_gated_delta_rule(q, k, v, g, beta, *, scale: float | None = None,
                               lengths: Sequence[int] | None = None) -> torch.Tensor:
    """Token-by-token reference form (O(T) sequential steps); the state restarts at each sequence start."""
    out_dtype = v.dtype
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    batch, length, heads, dk = k.shape
    starts = set(torch.tensor([0, *sequence_lengths(batch, length, lengths)]).cumsum(0)[:-1].tolist())
    q, k, v, g, beta = (t.transpose(1, 2).float() for t in (q, k, v, g, beta))
    state = q.new_zeros(batch, heads, dk, v.shape[-1])
    outputs = []
    for t in range(length):
        if t in starts:
            state = torch.zeros_like(state)
        state = state * g[:, :, t].exp()[..., None, None]
        k_t = k[:, :, t]
        u = beta[:, :, t, None] * (v[:, :, t] - (k_t.unsqueeze(-1) * state).sum(-2))
        state = state + k_t.unsqueeze(-1) * u.unsqueeze(-2)
        outputs.append(((scale * q[:, :, t]).unsqueeze(-1) * state).sum(-2))
    return torch.stack(outputs, dim=1).to(out_dtype)


@dataclass(frozen=True)
class _ChunkLayout:
    """Where every token goes in the step-major chunk layout ``[chunks, C]`` (see the module docstring).

    Step ``i`` of the recurrence handles chunk ``i`` of the ``active[i]`` sequences that have one; their chunks
    are the consecutive rows ``offsets[i] : offsets[i] + active[i]``, longest sequences first.
    """

    slots: torch.Tensor  # [B * T] position of each token in the flattened layout
    offsets: list[int]
    active: list[int]

    @property
    def num_chunks(self) -> int:
        return self.offsets[-1] + self.active[-1]

    @classmethod
    def build(cls, lengths: list[int], chunk_size: int, device: torch.device) -> _ChunkLayout:
        counts = torch.tensor([-(-n // chunk_size) for n in lengths])
        order = torch.argsort(counts, descending=True, stable=True)
        rank = torch.empty_like(order).scatter_(0, order, torch.arange(len(lengths)))
        steps = torch.arange(int(counts.max()))
        active = (counts[None, :] > steps[:, None]).sum(1)
        offsets = active.cumsum(0) - active
        seq = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
        position = torch.arange(len(seq)) - (torch.tensor(lengths).cumsum(0) - torch.tensor(lengths))[seq]
        chunk_row = offsets[position // chunk_size] + rank[seq]
        slots = chunk_row * chunk_size + position % chunk_size
        return cls(slots.to(device), offsets.tolist(), active.tolist())


def chunk_gated_delta_rule(q, k, v, g, beta, *, chunk_size: int = 64, scale: float | None = None,
                           lengths: Sequence[int] | None = None) -> torch.Tensor:
    """Chunked form (see the module docstring); equal to the recurrent form up to float rounding."""
    out_dtype = v.dtype
    batch, length, heads, dk = k.shape
    dv = v.shape[-1]
    scale = dk ** -0.5 if scale is None else scale
    layout = _ChunkLayout.build(sequence_lengths(batch, length, lengths), chunk_size, v.device)
    n = layout.num_chunks

    def chunked(t: torch.Tensor) -> torch.Tensor:  # [B, T, H, ...] -> [n, H, C, ...], zeros in the gaps
        flat = t.reshape(batch * length, *t.shape[2:]).float()
        out = flat.new_zeros(n * chunk_size, *flat.shape[1:]).index_copy(0, layout.slots, flat)
        return out.view(n, chunk_size, *flat.shape[1:]).transpose(1, 2)

    q, k, v, g, beta = chunked(q) * scale, chunked(k), chunked(v), chunked(g), chunked(beta)
    gamma = g.cumsum(-1)

    lower = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril()
    decay = torch.where(lower, gamma.unsqueeze(-1) - gamma.unsqueeze(-2), float("-inf")).exp()
    kk = (k @ k.transpose(-1, -2)) * decay * beta.unsqueeze(-1)
    unit_lower = torch.eye(chunk_size, dtype=q.dtype, device=q.device) + kk.tril(-1)
    w_v = torch.linalg.solve_triangular(unit_lower, beta.unsqueeze(-1) * v, upper=False, unitriangular=True)
    w_k = torch.linalg.solve_triangular(
        unit_lower, (beta * gamma.exp()).unsqueeze(-1) * k, upper=False, unitriangular=True
    )
    qk = (q @ k.transpose(-1, -2)) * decay
    q_decayed = q * gamma.exp().unsqueeze(-1)
    k_to_end = k * (gamma[..., -1:] - gamma).exp().unsqueeze(-1)
    chunk_decay = gamma[..., -1].exp()[..., None, None]

    state = q.new_zeros(layout.active[0], heads, dk, dv)
    outputs = []
    for start, count in zip(layout.offsets, layout.active, strict=True):
        rows = slice(start, start + count)
        state = state[:count]  # sequences without a chunk at this step (the shortest) are done
        u = w_v[rows] - w_k[rows] @ state
        outputs.append(q_decayed[rows] @ state + qk[rows] @ u)
        state = state * chunk_decay[rows] + k_to_end[rows].transpose(-1, -2) @ u
    out = torch.cat(outputs).transpose(1, 2).reshape(n * chunk_size, heads, dv)
    return out.index_select(0, layout.slots).view(batch, length, heads, dv).to(out_dtype)


@functools.cache
def fla_backward_is_broken() -> bool:
    """FLA's gated chunk backward refuses Triton >= 3.4.0 and < 3.7.1 on Hopper unless tilelang is installed."""
    if not (HAVE_FLA and torch.cuda.is_available()):
        return False
    import importlib.util

    import triton
    from packaging.version import Version

    hopper = torch.cuda.get_device_capability()[0] == 9 or "NVIDIA H" in torch.cuda.get_device_name()
    bad_triton = Version("3.4.0") <= Version(triton.__version__) < Version("3.7.1")
    return hopper and bad_triton and importlib.util.find_spec("tilelang") is None


def resolve_backend(backend: str, *, device: torch.device, needs_grad: bool) -> str:
    """Pick "fla" or "torch" for one call; ``backend`` is "auto", "fla" or "torch"."""
    if backend not in BACKENDS:
        raise ValueError(f"gdn backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "torch":
        return "torch"
    fla_ok = HAVE_FLA and device.type == "cuda"
    if backend == "fla" and not fla_ok:
        raise RuntimeError("gdn backend 'fla' needs flash-linear-attention installed and CUDA tensors")
    if not fla_ok:
        return "torch"
    if needs_grad and fla_backward_is_broken():
        _warn_fla_backward_once()
        return "torch"
    return "fla"


@functools.cache
def _warn_fla_backward_once() -> None:
    import triton

    warnings.warn(
        f"FLA's gated delta rule backward is disabled with Triton {triton.__version__} on Hopper GPUs "
        "(wrong gradients, FLA issue #640); training uses the pure-torch chunked form instead. Install "
        "Triton >= 3.7.1 or tilelang to train with FLA.",
        stacklevel=3,
    )


def gated_delta_rule(q, k, v, g, beta, *, backend: str = "auto", chunk_size: int = 64,
                     lengths: Sequence[int] | None = None) -> torch.Tensor:
    """Gated delta rule over raw q/k (L2-normalised here) with ``nk`` heads and v with ``nv`` heads.

    ``q, k [B, T, nk, dk]``, ``v [B, T, nv, dv]``, ``g, beta [B, T, nv]``; value head ``j`` reads q/k
    head ``j // (nv // nk)``. ``lengths``: sequences packed along T (``B == 1``; FLA gets them as
    ``cu_seqlens``); None: every row is one sequence. Returns ``[B, T, nv, dv]`` in v's dtype.
    """
    repeat = v.shape[2] // q.shape[2]
    q, k = l2norm(q), l2norm(k)
    if repeat > 1:
        q, k = q.repeat_interleave(repeat, dim=2), k.repeat_interleave(repeat, dim=2)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, g, beta))
    if resolve_backend(backend, device=v.device, needs_grad=needs_grad) == "fla":
        cu_seqlens = None
        if lengths is not None:
            lengths = sequence_lengths(v.shape[0], v.shape[1], lengths)
            cu_seqlens = torch.tensor([0, *lengths], device=v.device).cumsum(0)
        q, k, v = (t.to(v.dtype).contiguous() for t in (q, k, v))
        g, beta = g.float().contiguous(), beta.to(v.dtype).contiguous()
        out, _ = _fla_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, output_final_state=False,
                                             cu_seqlens=cu_seqlens)
        return out.to(v.dtype)
    return chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=chunk_size, lengths=lengths)
