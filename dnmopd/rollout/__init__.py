"""Rollout generation: the `RolloutEngine` interface and the definition of the rollout log-prob (`base`),
the sampling distribution (`sampling`), and the backends `inprocess`, `sglang` and `vllm`. A backend is
chosen by name in the config and imported only then (`rollout_class`)."""

from __future__ import annotations

import importlib

ROLLOUT_BACKENDS = {
    "inprocess": ("dnmopd.rollout.inprocess", "InProcessRollout"),
    "sglang": ("dnmopd.rollout.sglang", "SGLangRollout"),
    "vllm": ("dnmopd.rollout.vllm", "VLLMRollout"),
}


def rollout_class(backend: str):
    """The RolloutEngine class of `backend`; its nested `Config` is what a run configures."""
    if backend not in ROLLOUT_BACKENDS:
        raise ValueError(f"rollout backend {backend!r}: use one of {sorted(ROLLOUT_BACKENDS)}")
    module, name = ROLLOUT_BACKENDS[backend]
    return getattr(importlib.import_module(module), name)
