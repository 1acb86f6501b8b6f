"""The frozen evaluation protocol ``dn-mopd-eval-v1`` (reference-behavior section 7): every constant of it.

Changing a value here makes scores that are not comparable with the paper's; runs therefore record the
protocol id and every departure from it (``deviations`` in a run's manifest).
"""

from __future__ import annotations

from dataclasses import dataclass

PROTOCOL_ID = "dn-mopd-eval-v1"

AIME_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."
"""Appended to every AIME and MATH-500 problem (one user turn)."""

CAPS = (8192, 16384)
"""Generation caps of the paper (main tables 16K, appendix 8K)."""
CONTEXT = 32768
"""The six suites' engine context (max_model_len): prompt + cap must fit, prompts are never trimmed."""

TEMPERATURE, TOP_P, TOP_K, SEED = 1.0, 1.0, -1, 42
ENABLE_THINKING = False


@dataclass(frozen=True, slots=True)
class Suite:
    name: str
    domain: str
    """math, code, if; ``math500`` is reported apart from the Total."""
    questions: int
    n: int
    """Sampled answers per question (avg@n)."""
    chunk: int
    """Questions per engine call and per raw chunk file."""
    grader: str
    """aime, math500, lcb or if."""


SUITES = {s.name: s for s in (
    Suite("aime25", "math", 30, 64, 4, "aime"),
    Suite("aime26", "math", 30, 64, 4, "aime"),
    Suite("lcb_v5", "code", 167, 6, 16, "lcb"),
    Suite("lcb_v6", "code", 175, 6, 16, "lcb"),
    Suite("ifeval", "if", 541, 16, 32, "if"),
    Suite("ifbench", "if", 300, 16, 32, "if"),
    Suite("math500", "math500", 500, 16, 500, "math500"),
)}
SIX = ("aime25", "aime26", "lcb_v5", "lcb_v6", "ifeval", "ifbench")
"""The suites of the Total, in the protocol's order (also the bootstrap's draw order)."""
DOMAINS = {"math": ("aime25", "aime26"), "code": ("lcb_v5", "lcb_v6"), "if": ("ifeval", "ifbench")}

CATALOG_SHA256 = {
    "aime25": "0669f0ee3de6a6c7e66d214a37b4da316b85f4af3f5e4790a4110a27e62d0268",
    "aime26": "2a628293c7db5294c916ff48a810d174f3a81bde0b8a4a18efa1c6867e6faf5d",
    "lcb_v5": "e528ee172aa6ef32f0fb59796e843679530173b82086f26fb2eb6202fa1bcb4b",
    "lcb_v6": "14777a823bade8a1d3480f6aafbedccfdecd3d3e2c69387683515d8b2dc92e5d",
    "ifeval": "bd5be9acdfcc6f4019db1014422055bf4ecf265b3c877ff41d824fd6285a8d84",
    "ifbench": "f3ef730c359be914d2d1654d178e94d22ed312a7afaf608a89cbfa31508f90e0",
}
"""sha256 of the complete catalogs the paper's answers were generated from (MATH-500: its source file's)."""

CHAT_TEMPLATE_SHA256 = {
    "Qwen3.5-2B": "273d8e0e683b885071fb17e08d71e5f2a5ddfb5309756181681de4f5a1822d80",
    "Qwen3.5-4B/9B": "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715",
}
"""The paper models' chat templates; another template is recorded as a deviation."""

LCB_RUNNER = ("LiveCodeBench/LiveCodeBench", "28fef95ea8c9f7a547c8329f2cd3d32b92c1fa24")
"""The official runner whose rules LiveCodeBench is graded by (``lcb_runner/evaluation/testing_util.py``, last
changed at 16de2a1e, 2025-05-23; the revision before it, 15808c76, patches ``sys.stdin`` without ``buffer``)."""
IFBENCH_CHECKERS = ("allenai/IFBench", "1091c4c3de6c1f6ed12c012ed68f11ea450b0117")
"""The IFBench checkers of the published results: the commit the benchmark's test file is pinned at."""
LCB_TIMEOUT_S = 6
"""Per test; the global deadline of one answer is (timeout + 1) * tests + 5 seconds."""
LCB_MEMORY_BYTES = 8 << 30
LCB_WORKERS = 4
"""Problems graded in parallel."""

IF_GRADING_SEED = 0
"""random.seed and langdetect's DetectorFactory.seed around every IF check."""

BOOTSTRAP_B = 10_000
BOOTSTRAP_SEED = 20260923


def lcb_deadline_s(tests: int, timeout_s: float = LCB_TIMEOUT_S) -> float:
    """Wall-clock budget of one answer over all of its tests."""
    return (timeout_s + 1) * tests + 5
