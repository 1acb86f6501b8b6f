"""Rule-based verifiers: is a response correct for its row's label?

``Verifiers(math=..., ifeval=..., code=..., domains=...)`` holds the verifiers of a run's domains and
``verify(domain, response, label) -> bool | None`` dispatches on the row's domain (``metadata.domain``,
compared case-insensitively): ``math`` -> ``verifiers.math.MathVerifier`` (last ``\\boxed{}``), ``ifeval`` ->
``verifiers.ifeval.IfVerifier`` (strict conjunction of the label's constraints, trailing end-of-turn markers
stripped), both in killable worker processes under a per-check deadline (``verifiers.workers``), ``code`` ->
``verifiers.code.CodeJudge`` (sandboxed test run, bounded by the sandbox's limits).
``None`` means no verdict (the checker itself failed or timed out), never "wrong". A malformed label
raises (labels are validated when the data is loaded, so it is a bug, not a wrong answer); an unknown
domain is refused when the verifiers are built. Nothing here is process-wide: whoever builds a
``Verifiers`` closes it (the trainer through ``dnmopd.trainer.experience.verification``), or uses it as a
context manager.
"""

from __future__ import annotations

from collections.abc import Iterable

DOMAINS = ("math", "code", "ifeval")
_KINDS = {"math": "math", "ifeval": "ifeval", "code": "code", "code-a3b": "code"}


def verifier_kind(domain: str) -> str:
    """Which verifier judges a domain's rows (``math``, ``code`` or ``ifeval``)."""
    kind = _KINDS.get(domain.lower())
    if kind is None:
        raise ValueError(f"no verifier for domain {domain!r} (known: {', '.join(DOMAINS)})")
    return kind


class Verifiers:
    """The verifiers of `domains`, each built from its config (None: its defaults) only if a domain needs it:
    the math and IF checker pools, the code judge (which checks the sandbox) for code."""

    def __init__(self, *, math=None, ifeval=None, code=None, domains: Iterable[str] = DOMAINS):
        kinds = {verifier_kind(domain) for domain in domains}
        self._math = self._ifeval = self._code = None
        if "math" in kinds:
            from dnmopd.verifiers.math import MathVerifier

            self._math = MathVerifier(math)
        if "ifeval" in kinds:
            from dnmopd.verifiers.ifeval import IfVerifier

            self._ifeval = IfVerifier(ifeval)
        if "code" in kinds:
            from dnmopd.verifiers.code import CodeJudge

            try:
                self._code = CodeJudge(code)
            except BaseException:
                self.close()
                raise

    def verify(self, domain: str, response: str, label: str) -> bool | None:
        """Correctness verdict of ``response`` for a row of ``domain`` with reference ``label``."""
        kind = verifier_kind(domain)
        verifier = {"math": self._math, "ifeval": self._ifeval, "code": self._code}[kind]
        if verifier is None:
            raise ValueError(f"these verifiers were built without the {kind} verifier (domain {domain!r})")
        return verifier.judge(response, label) if kind == "code" else verifier.verify(response, label)

    def close(self) -> None:
        for verifier in (self._math, self._ifeval, self._code):
            if verifier is not None:
                verifier.close()
        self._math = self._ifeval = self._code = None

    def __enter__(self) -> Verifiers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
