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

Every change is made by the :func:`cpu_compat` context manager and undone when its outermost ``with`` exits;
the CPU entry points (the trainer's ``run``, the converter, the student benchmark) and the tests enter it
around the work that builds and runs megatron-core models. On a machine with CUDA it changes nothing and
yields False, so GPU runs are never affected. Model code must still choose CPU-friendly options
(``use_cpu_initialization``, no fused kernels, no sequence parallelism); the builder in
``dnmopd.student.build`` does that.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode

_CPU = torch.device("cpu")
_CUDA_PATCHES = {
    "current_device": lambda: "cpu",
    "synchronize": lambda *args, **kwargs: None,
    "set_device": lambda *args, **kwargs: None,
    "get_rng_state": lambda *args, **kwargs: torch.get_rng_state(),
    "set_rng_state": lambda state, *args, **kwargs: torch.set_rng_state(state),
    "manual_seed": lambda seed: torch.default_generator.manual_seed(seed),
}
_MEGATRON_RNG_PATCHES = {
    "_get_cuda_rng_state": lambda *args, **kwargs: torch.get_rng_state(),
    "_set_cuda_rng_state": lambda state, *args, **kwargs: torch.set_rng_state(state),
}
_lock = threading.Lock()
_active: dict[str, object] = {}  # while entered: the depth, the originals and the entered mode


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


def _swap(target, patches: dict) -> dict:
    """Set `patches` on `target`; returns the attributes they replaced."""
    originals = {name: getattr(target, name) for name in patches}
    for name, value in patches.items():
        setattr(target, name, value)
    return originals


@contextmanager
def cpu_compat() -> Iterator[bool]:
    """Make megatron-core usable on CPU inside the block; yields True if the layer is active, False on CUDA
    machines (where nothing changes). Re-entrant: nested blocks share one activation, undone when the outermost
    exits. The device rewrite (a ``TorchFunctionMode``) covers the entering thread."""
    if torch.cuda.is_available():
        yield False
        return
    import megatron.core.tensor_parallel.random as megatron_random

    with _lock:
        if not _active:
            mode = _CudaToCpuMode()
            _active.update(depth=0, mode=mode, cuda=_swap(torch.cuda, _CUDA_PATCHES),
                           megatron=_swap(megatron_random, _MEGATRON_RNG_PATCHES))
            mode.__enter__()
        _active["depth"] += 1
    try:
        yield True
    finally:
        with _lock:
            _active["depth"] -= 1
            if _active["depth"] == 0:
                _active["mode"].__exit__(None, None, None)
                _swap(torch.cuda, _active["cuda"])
                _swap(megatron_random, _active["megatron"])
                _active.clear()
