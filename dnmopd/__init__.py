"""dnmopd: Domain-Normalized Multi-Teacher On-Policy Distillation on megatron-core.

Packages in the order data flows through a run (docs/package-map.md): ``data`` (rows -> prompts) ->
``rollout`` (the student's answers) -> ``teachers`` (their scores; ``serving`` is the HTTP plumbing of both) and
``verifiers`` (verdicts, running code in ``sandbox``) -> ``core`` (routing, multipliers) and ``kernels`` (fused
LM-head losses) -> ``trainer`` (the update loop) over ``student`` (the megatron model) -> ``hf`` (releases) ->
``eval`` (the frozen evaluation). Beside them: ``config`` (typed YAML), ``registry`` (backends chosen by name),
``io`` (atomic writes, JSONL, hashes), ``examples`` (the CPU demo's tiny models), ``benchmarks``.
"""

from pathlib import Path

__version__ = "0.1.0"

CHECKOUT = Path(__file__).resolve().parent.parent
"""The source checkout around this package (meaningful only when running from a checkout, not an install)."""
