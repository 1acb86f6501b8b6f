"""Rollout generation: the `RolloutEngine` interface and the definition of the rollout log-prob (`base`),
the sampling distribution (`sampling`), and the backends `inprocess`, `sglang` and `vllm` (the last two over
`http_engine`, their shared HTTP engine). A backend is chosen by name in the config and imported only then
(`rollout_class`)."""

from __future__ import annotations

from dnmopd.registry import LazyRegistry

rollout_class = LazyRegistry("rollout backend", {
    "inprocess": "dnmopd.rollout.inprocess:InProcessRollout",
    "sglang": "dnmopd.rollout.sglang:SGLangRollout",
    "vllm": "dnmopd.rollout.vllm:VLLMRollout",
})
"""`rollout_class(backend)`: the RolloutEngine class of `backend`; its nested `Config` is what a run configures."""
