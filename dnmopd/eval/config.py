"""The evaluation config (``launch/evaluate.py run``): a typed tree loaded like the trainer's, with the
rollout engine chosen by its ``backend`` key."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from dnmopd.config import Backend, Choice
from dnmopd.eval.protocol import CAPS, LCB_MEMORY_BYTES, LCB_TIMEOUT_S, LCB_WORKERS, SUITES
from dnmopd.rollout import rollout_class


def _engine_config(backend: str) -> type:
    return rollout_class(backend).Config


@dataclass(kw_only=True, slots=True)
class CodeGradingConfig:
    timeout_s: float = float(LCB_TIMEOUT_S)
    """Wall and CPU seconds per LiveCodeBench test (protocol: 6)."""
    memory_bytes: int = LCB_MEMORY_BYTES
    """Address space (and resident memory of all processes) of a program under test (protocol: 8 GiB)."""
    workers: int = LCB_WORKERS
    """Answers of one question run at once (protocol: at most 4 problems in parallel)."""
    min_isolation: str = "landlock"
    """Weakest sandbox isolation accepted (namespaces > landlock > seccomp)."""


@dataclass(kw_only=True, slots=True)
class EvalConfig:
    model: str
    """Hugging Face folder of the model: tokenizer and chat template (and the weights, for the inprocess engine)."""
    engine: Annotated[Choice, Backend(_engine_config)]
    """Generation engine: {backend: inprocess | vllm | sglang, ...its options} (the rollout backends)."""
    name: str = ""
    """Model name in records and output folders (default: the model folder's name; a trainer release,
    `<run_dir>/release`, is named after its run)."""
    suites: list[str] = field(default_factory=lambda: list(SUITES))
    """Suites to run, any of aime25, aime26, lcb_v5, lcb_v6, ifeval, ifbench, math500."""
    max_tokens: int = 16384
    """Generation cap (protocol: 8192 or 16384; anything else is recorded as a deviation)."""
    data_dir: Path = Path("eval_data")
    """Prepared catalogs (``launch/evaluate.py prepare``), LiveCodeBench tests and NLTK data."""
    output_dir: Path = Path("runs/eval")
    """Results go to <output_dir>/<name>/<suite>/cap<max_tokens>/."""
    limit: int | None = None
    """Only the first `limit` questions of each suite (a deviation: for smoke runs)."""
    n: int | None = None
    """Answers per question instead of the protocol's n (a deviation)."""
    code: CodeGradingConfig = field(default_factory=CodeGradingConfig)
    """LiveCodeBench sandbox limits."""
    progress: bool = True
    """Progress bars on generation and grading."""

    def __post_init__(self):
        unknown = [s for s in self.suites if s not in SUITES]
        if unknown or not self.suites:
            raise ValueError(f"suites: unknown {unknown}; choose from {list(SUITES)}")
        if self.max_tokens < 1 or (self.limit is not None and self.limit < 1) or (self.n is not None and self.n < 1):
            raise ValueError("max_tokens, limit and n must be >= 1")

    @property
    def protocol_cap(self) -> bool:
        return self.max_tokens in CAPS
