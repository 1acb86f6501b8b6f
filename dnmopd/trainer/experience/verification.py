"""The run's verifiers as one service: every correctness verdict of the trainer comes from `Verification.verdict`.

A verdict is True (correct), False (wrong) or None: no verdict, because the verifier timed out, its worker
crashed, or it raised (a verifier bug, or a label it cannot use). Model output is hostile input, so no
verifier failure may stop a run: a None verdict is logged here with its cause, counted by the caller
(`no_verdict/<domain>`), and scored as wrong by every mode (reward 0 in GRPO, not correct for accuracy and
for choosing the injected response), as the paper did (reference-behavior 6.1). `on_no_verdict: stop` stops
the run instead, for debugging a verifier.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from dnmopd.verifiers import Verifiers
from dnmopd.verifiers.code import CodeJudge
from dnmopd.verifiers.ifeval import IfVerifier
from dnmopd.verifiers.math import MathVerifier

logger = logging.getLogger(__name__)

NO_VERDICT_POLICIES = ("wrong", "stop")
LOGGED_PER_DOMAIN = 20
"""No-verdict warnings logged per domain before only every 100th is (the counters keep counting)."""


class VerificationError(RuntimeError):
    """A verifier gave no verdict and `verifiers.on_no_verdict` is `stop`."""


class Verification:
    @dataclass(kw_only=True, slots=True)
    class Config:
        math: MathVerifier.Config = field(default_factory=MathVerifier.Config)
        """The math grader: rules (math_verify or paper), worker processes, per-answer time-out, memory limit."""
        ifeval: IfVerifier.Config = field(default_factory=IfVerifier.Config)
        """The IF checker: rules (strict or paper), worker processes, per-response time-out, memory limit."""
        code: CodeJudge.Config = field(default_factory=CodeJudge.Config)
        """The code judge: rules (per_test or paper), workers, time limits, memory, minimum sandbox isolation."""
        on_no_verdict: str = "wrong"
        """wrong: a response the verifier could not judge (time-out, crash, exception) counts as wrong and is
        logged and counted (no_verdict/<domain>), as in the paper; stop: the run stops with the cause."""

        def __post_init__(self):
            if self.on_no_verdict not in NO_VERDICT_POLICIES:
                raise ValueError(f"verifiers.on_no_verdict must be one of {NO_VERDICT_POLICIES}, "
                                 f"got {self.on_no_verdict!r}")

    def __init__(self, config: Config, domains: Iterable[str]):
        self.config = config
        self.verifiers = Verifiers(math=config.math, ifeval=config.ifeval, code=config.code, domains=domains)
        self.failures: Counter[str] = Counter()
        """No-verdict count per domain since the start (for logs; metrics count per batch)."""
        self._lock = threading.Lock()

    def verdict(self, domain: str, response: str, label: str) -> bool | None:
        """True / False, or None when the verifier could not judge (never raises, unless policy `stop`)."""
        try:
            verdict = self.verifiers.verify(domain, response, label)
            cause = "the verifier timed out or its worker failed (see its log line)"
        except Exception as error:  # noqa: BLE001 - any verifier failure is a missing verdict, never a crash
            verdict, cause = None, f"the verifier raised {type(error).__name__}: {error}"
        if verdict is not None:
            return verdict is True
        with self._lock:
            self.failures[domain] += 1
            count = self.failures[domain]
        if self.config.on_no_verdict == "stop":
            raise VerificationError(f"no {domain} verdict: {cause} (verifiers.on_no_verdict=stop)")
        if count <= LOGGED_PER_DOMAIN or count % 100 == 0:
            logger.warning("no %s verdict (#%d, scored as wrong): %s", domain, count, cause)
        return None

    def close(self) -> None:
        self.verifiers.close()
