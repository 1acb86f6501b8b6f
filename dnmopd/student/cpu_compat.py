"""Run megatron-core on a CPU-only machine with the gloo backend.

megatron-core assumes CUDA in three ways; each is handled here and nowhere else:

1. ``torch.cuda`` calls used for bookkeeping (``current_device``, ``synchronize``, ``set_device``) and for
   the model-parallel RNG (``get_rng_state``/``set_rng_state``/``manual_seed``): replaced by CPU
   equivalents, and megatron's private CUDA RNG helpers are pointed at the CPU generator so that
   ``model_parallel_cuda_manual_seed`` and the RNG tracker's ``fork()`` work.
2. Hard-coded ``device="cuda"`` literals (causal masks, pipeline schedules, checkpoint exchange,
   ``Tensor.cuda()``): a process-wide ``TorchFunctionMode`` rewrites any CUDA device argument to CPU.
3. Pinned host memory: ``pin_memory=True`` is dropped (it needs a CUDA driver).
4. dtype checks written as ``tensor.type() == "torch.cuda.FloatTensor"`` (gradient clipping, the optimizers):
   ``Tensor.type()`` without arguments reports a CPU tensor by its CUDA type name.

The runtime calls :func:`enable_cpu_compat` explicitly when no GPU is present. On a machine with CUDA it
does nothing and returns False, so GPU runs are never affected. Model code must still choose
CPU-friendly options (``use_cpu_initialization``, no fused kernels, no sequence parallelism); the builder in
``dnmopd.student.build`` does that.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

_CPU = torch.device("cpu")
_state: dict[str, object] = {}


def _is_cuda_device(device) -> bool:
    if isinstance(device, bool):
        return False
    if isinstance(device, int):
        return True  # a bare int is a CUDA ordinal
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return False


class _CudaToCpuMode(TorchFunctionMode):
    """Rewrites CUDA device arguments of every torch call to the CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if _is_cuda_device(kwargs.get("device")):
            kwargs["device"] = _CPU
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            name = func(*args)
            return name if name.startswith("torch.cuda.") else name.replace("torch.", "torch.cuda.", 1)
        if func is torch.Tensor.to and len(args) > 1 and _is_cuda_device(args[1]):
            args = (args[0], _CPU, *args[2:])
        return func(*args, **kwargs)


def _patch_torch_cuda() -> None:
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.set_device = lambda *args, **kwargs: None
    torch.cuda.get_rng_state = lambda *args, **kwargs: torch.get_rng_state()
    torch.cuda.set_rng_state = lambda state, *args, **kwargs: torch.set_rng_state(state)
    torch.cuda.manual_seed = lambda seed: torch.default_generator.manual_seed(seed)


def _patch_megatron_rng() -> None:
    import megatron.core.tensor_parallel.random as megatron_random

    megatron_random._get_cuda_rng_state = lambda *args, **kwargs: torch.get_rng_state()
    megatron_random._set_cuda_rng_state = lambda state, *args, **kwargs: torch.set_rng_state(state)


def enable_cpu_compat() -> bool:
    """Make megatron-core usable on CPU; returns True if the layer is active, False on CUDA machines.

    Idempotent. Call it once per process before building megatron-core models (the student runtime
    does this when ``torch.cuda.is_available()`` is False).
    """
    if torch.cuda.is_available():
        return False
    if "mode" not in _state:
        _patch_torch_cuda()
        _patch_megatron_rng()
        mode = _CudaToCpuMode()
        mode.__enter__()  # stays active for the life of the process
        _state["mode"] = mode
    return True


def cpu_compat_enabled() -> bool:
    """True when :func:`enable_cpu_compat` has activated the layer in this process."""
    return "mode" in _state
