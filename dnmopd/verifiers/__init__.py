"""Rule-based verifiers: is a response correct for its row's label?

``verify(domain, response, label) -> bool | None`` dispatches on the row's domain (``metadata.domain``,
compared case-insensitively): ``math`` -> ``verifiers.math`` (last ``\\boxed{}``, math-verify, killable
workers), ``ifeval`` -> ``verifiers.ifeval`` (strict conjunction of the label's constraints, trailing
end-of-turn markers stripped), ``code`` -> ``verifiers.code.judge`` (sandboxed test run). ``None`` means no
verdict (the checker itself failed or timed out), never "wrong". A malformed IF label and an unknown domain
are errors (labels are validated when the data is loaded, so either is a bug, not a wrong answer).
"""

from __future__ import annotations

import atexit
import threading

DOMAINS = ("math", "code", "ifeval")

_math_lock = threading.Lock()
_math_verifier = None


def default_math_verifier():
    """The process-wide math grader pool used by ``verify`` (started on first use, closed at exit)."""
    global _math_verifier
    with _math_lock:
        if _math_verifier is None:
            from dnmopd.verifiers.math import MathVerifier

            _math_verifier = MathVerifier()
            atexit.register(_math_verifier.close)
        return _math_verifier


def verify(domain: str, response: str, label: str) -> bool | None:
    """Correctness verdict of ``response`` for a row of ``domain`` with reference ``label``."""
    kind = domain.lower()
    if kind == "math":
        return default_math_verifier().verify(response, label)
    if kind == "ifeval":
        from dnmopd.verifiers import ifeval

        return ifeval.verify(response, label)
    if kind in ("code", "code-a3b"):
        from dnmopd.verifiers import code

        return code.judge(response, label)
    raise ValueError(f"no verifier for domain {domain!r} (known: {', '.join(DOMAINS)})")
