"""Implementations of one OPD loss step through the LM head, all run on the same inputs.

Every provider computes the clipped OPD loss of ``reference-behavior`` 1.6 with one optimizer step per
rollout (old log-prob = the current one, detached: ratio 1) from ``hidden @ weight.T`` and backpropagates
it to hidden and weight. They differ only in how the per-token log-prob and its gradient are obtained:

- ``floor``: no loss at all, the three cuBLAS GEMMs every method must run (logits, grad hidden, grad
  weight) on a precomputed bf16 logits gradient: the time floor of the step.
- ``floor_chunked``: the same three GEMMs per token chunk, chunked as ``dnmopd`` chunks (diagnostic).
- ``torch``: materialised logits, ``log_softmax`` in float32, autograd.
- ``torch_compile``: the same function under ``torch.compile``.
- ``liger``: Liger-Kernel's fused linear cross-entropy (reduction none), logp = -CE.
- ``cce``: Cut Cross-Entropy ``linear_cross_entropy`` (reduction none), logp = -CE.
- ``dnmopd``: ``dnmopd.kernels.fused_opd_loss`` (log-prob, loss and gradient fused, 3 GEMMs), on the
  backend the device gets by default (Triton on CUDA, native torch on CPU); ``dnmopd:backend=triton`` or
  ``dnmopd:backend=native`` forces one (Triton on CPU is the interpreter).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import torch

from dnmopd.kernels.opd_loss import fused_opd_loss
from dnmopd.kernels.utils import chunk_budget, chunk_rows, kernel_backend, use_triton


@dataclass
class StepInputs:
    """One micro-batch of the OPD loss: N tokens of R responses through a [V, D] head shard."""

    hidden: torch.Tensor  # [N, D], requires grad
    weight: torch.Tensor  # [V, D], requires grad
    targets: torch.Tensor  # [N]
    response_ids: torch.Tensor  # [N]
    response_weights: torch.Tensor  # [R]
    teacher_logp: torch.Tensor  # [N]
    mask: torch.Tensor  # [N] bool

    @property
    def num_responses(self) -> int:
        return self.response_weights.shape[0]

    def upcast(self, dtype: torch.dtype = torch.float64) -> StepInputs:
        leaf = lambda t: t.detach().to(dtype).requires_grad_()  # noqa: E731
        return StepInputs(leaf(self.hidden), leaf(self.weight), self.targets, self.response_ids,
                          self.response_weights, self.teacher_logp, self.mask)


def make_inputs(tokens: int, hidden: int, vocab: int, dtype: torch.dtype, device, seed: int = 0,
                responses: int = 16) -> StepInputs:
    """Random inputs with realistic logit magnitudes (std ~3 per logit, max ~15 over a 248K vocab).

    Drawn on ``device`` directly (a 248K x 4096 head is 1G numbers).
    """
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)
    randn = lambda *shape: torch.randn(*shape, generator=gen, device=device)  # noqa: E731
    h = randn(tokens, hidden).to(dtype)
    w = randn(vocab, hidden).mul_(3.0 / hidden**0.5).to(dtype)
    responses = max(1, min(responses, tokens))
    return StepInputs(
        hidden=h.requires_grad_(),
        weight=w.requires_grad_(),
        targets=torch.randint(0, vocab, (tokens,), generator=gen, device=device),
        response_ids=torch.arange(tokens, device=device) * responses // max(tokens, 1),
        response_weights=torch.rand(responses, generator=gen, device=device) * 1.5 + 0.5,
        teacher_logp=-torch.rand(tokens, generator=gen, device=device) * 4.0,
        mask=torch.rand(tokens, generator=gen, device=device) > 0.1,
    )


def opd_loss_from_logp(logp: torch.Tensor, x: StepInputs) -> torch.Tensor:
    """The clipped OPD loss (ratio 1: old = logp.detach()) in plain torch, in logp's dtype."""
    old = logp.detach()
    weight = x.response_weights.to(logp.dtype)[x.response_ids]
    advantage = torch.where(x.mask, weight * (x.teacher_logp.to(logp.dtype) - old), 0.0)
    ratio = torch.exp(torch.where(x.mask, logp - old, 0.0))
    pg = torch.maximum(-ratio * advantage, -ratio.clamp(0.8, 1.2) * advantage)
    counts = torch.zeros(x.num_responses, dtype=logp.dtype, device=logp.device)
    counts.index_add_(0, x.response_ids, x.mask.to(logp.dtype))
    return (pg * x.mask / counts.clamp(min=1.0)[x.response_ids]).sum() / x.num_responses


def torch_logp(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = hidden @ weight.t()
    if logits.dtype in (torch.bfloat16, torch.float16):
        logits = logits.float()
    return torch.log_softmax(logits, dim=-1).gather(1, targets[:, None])[:, 0]


def torch_step(x: StepInputs) -> torch.Tensor:
    return opd_loss_from_logp(torch_logp(x.hidden, x.weight, x.targets), x)


@dataclass(frozen=True)
class Provider:
    name: str
    setup: Callable[[StepInputs, dict], Callable[[], torch.Tensor | None]]  # (inputs, options) -> step
    needs: Callable[[torch.device], str | None]  # reason it cannot run on this device, or None


def _backward(loss_fn):
    return lambda x, _opts: lambda: backward(loss_fn(x))


def backward(loss: torch.Tensor) -> torch.Tensor:
    loss.backward()
    return loss.detach()


def _needs_cuda(module: str | None = None):
    def check(device: torch.device) -> str | None:
        if device.type != "cuda":
            return "needs a CUDA device"
        if module is not None and importlib.util.find_spec(module) is None:
            return f"python package '{module}' is not installed"
        return None

    return check


def _runs_anywhere(_device) -> str | None:
    return None


def _floor(x: StepInputs, opts: dict) -> Callable[[], None]:
    """logits = h W^T, grad_h = G W, grad_W = G^T h, with G a fixed [N, V] tensor (chunked if asked)."""
    h, w = x.hidden.detach(), x.weight.detach()
    gen = torch.Generator(device=h.device).manual_seed(1)
    grad_logits = torch.randn(h.shape[0], w.shape[0], generator=gen, device=h.device, dtype=h.dtype)
    rows = opts.get("chunk_rows") or h.shape[0]
    logits = torch.empty(min(rows, h.shape[0]), w.shape[0], dtype=h.dtype, device=h.device)
    grad_h, grad_w = torch.empty_like(h), torch.empty_like(w)

    def step():
        for start in range(0, h.shape[0], rows):
            end = min(start + rows, h.shape[0])
            torch.mm(h[start:end], w.t(), out=logits[: end - start])
            torch.mm(grad_logits[start:end], w, out=grad_h[start:end])
            if start == 0:
                torch.mm(grad_logits[start:end].t(), h[start:end], out=grad_w)
            else:
                grad_w.addmm_(grad_logits[start:end].t(), h[start:end])

    return step


def _compiled(x: StepInputs, _opts: dict) -> Callable[[], None]:
    compiled = torch.compile(torch_step, dynamic=False)
    return lambda: backward(compiled(x))


def _liger(x: StepInputs, _opts: dict) -> Callable[[], None]:
    from liger_kernel.ops import LigerFusedLinearCrossEntropyFunction

    def loss(x):
        # positional: input, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing,
        # reduction; returns (loss, z_loss, token_accuracy, predicted_tokens)
        nll = LigerFusedLinearCrossEntropyFunction.apply(
            x.hidden, x.weight, x.targets, None, None, -100, 0.0, 0.0, "none"
        )[0]
        return opd_loss_from_logp(-nll.float(), x)

    return lambda: backward(loss(x))


def _cce(x: StepInputs, _opts: dict) -> Callable[[], None]:
    from cut_cross_entropy import linear_cross_entropy

    def loss(x):
        nll = linear_cross_entropy(x.hidden, x.weight, x.targets, reduction="none")
        return opd_loss_from_logp(-nll.float(), x)

    return lambda: backward(loss(x))


def dnmopd_loss(x: StepInputs, opts: dict) -> torch.Tensor:
    with kernel_backend(opts.get("backend", "auto")):  # the gradient is computed here, in the forward
        return fused_opd_loss(
            x.hidden, x.weight, x.targets, x.response_ids, x.response_weights, teacher_logp=x.teacher_logp,
            mask=x.mask, chunk_size=opts.get("chunk_rows"), logits_dtype=opts.get("logits_dtype"),
        ).loss


def _dnmopd(x: StepInputs, opts: dict) -> Callable[[], None]:
    return lambda: backward(dnmopd_loss(x, opts))


def default_chunk_rows(x: StepInputs, backend: str = "auto") -> int:
    """Token rows per chunk that ``fused_opd_loss`` picks for these inputs by default on ``backend``."""
    with kernel_backend(backend):
        budget = chunk_budget(use_triton(x.hidden.device))
    return chunk_rows(x.hidden.shape[0], x.weight.shape[0], x.hidden.element_size(), None, budget)


PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        Provider("floor", _floor, _runs_anywhere),
        Provider("floor_chunked", _floor, _runs_anywhere),
        Provider("torch", _backward(torch_step), _runs_anywhere),
        Provider("torch_compile", _compiled, _runs_anywhere),
        Provider("liger", _liger, _needs_cuda("liger_kernel")),
        Provider("cce", _cce, _needs_cuda("cut_cross_entropy")),
        Provider("dnmopd", _dnmopd, _runs_anywhere),
    )
}
