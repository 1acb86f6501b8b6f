"""Math verifier: the last ``\\boxed{}`` of a response, checked for equivalence with the label.

``grade(response, label, rules)`` is the pure rule. The answer is the content of the response's last
``\\boxed{...}`` (braces balanced); a response whose last ``\\boxed`` is not followed by a closed ``{...}``
(cut off mid-answer, ``\\boxed 5``) has no answer, even when an earlier box is complete. No answer or an
empty label -> False; a label that itself contains ``\\boxed`` is unwrapped the same way. Two rule sets decide
equality (``MathVerifier.Config.rules``):

* ``math_verify`` (the default): both sides parsed by math-verify (LaTeX and plain expressions) and compared
  (string, numeric and symbolic equality, sets and intervals), hedged answers refused (``_math_verify_equal``:
  ``2 \\text{ (or 3)}``, ``5 = 4``);
* ``paper``: the paper's GRPO math reward, Hendrycks MATH normalisation plus sympy equality
  (``verifiers.math_paper``).

They differ on purpose and are listed in docs/verifiers.md; e.g. ``\\boxed{5!}`` for ``120``,
``2^{10}`` for ``1024``, ``\\frac24`` for ``\\frac12`` and ``1, 2, 3`` for ``3, 2, 1`` pass math-verify and fail
the paper's rules; ``1e3`` for ``1000`` is the reverse.

Symbolic comparison can run for minutes (``9^{9^{9^{9}}}``), so ``MathVerifier`` runs ``grade`` in a pool of
persistent worker processes (``verifiers.workers.GraderPool``) and bounds each answer by ``timeout_s``: a
worker that does not answer in time is killed and replaced, and the verdict is ``None`` (no verdict), never a
silent False. A worker that dies or fails to start also gives ``None``. (The reference scored a timed-out
answer False; ``None`` keeps "the checker failed" apart from "the answer is wrong", and GRPO maps it to reward 0
anyway.)
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from dnmopd.verifiers import math_paper
from dnmopd.verifiers.workers import GraderPool

_BOX = "\\boxed"


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (braces balanced); None when the last ``\\boxed`` has no closed
    ``{...}`` right after it, or there is none."""
    start = text.rfind(_BOX)
    if start < 0 or not text.startswith("{", start + len(_BOX)):
        return None
    depth, begin = 0, start + len(_BOX)
    for pos in range(begin, len(text)):
        if text[pos] == "{":
            depth += 1
        elif text[pos] == "}":
            depth -= 1
            if depth == 0:
                return text[begin + 1:pos]
    return None


def _math_verify_parsed_equal(answer: str, gold: str) -> bool:
    from math_verify import parse, verify

    if not gold.strip() or not answer.strip():
        return False
    # Time bounds are ours (the worker is killed); math-verify's own SIGALRM timeouts would turn a hang into
    # a silent False.
    gold_parsed = parse(f"{_BOX}{{{gold}}}", parsing_timeout=None)
    answer_parsed = parse(f"{_BOX}{{{answer}}}", parsing_timeout=None)
    return bool(verify(gold_parsed, answer_parsed, timeout_seconds=None))


_TEXT = re.compile(r"\\(?:text|textbf|textit|textrm|textsf|texttt|textnormal|mbox)\s*\{((?:[^{}]|\{[^{}]*\})*)\}"
                   r"(?:\s*\^\s*(?:\{[^{}]*\}|[0-9]))?")
"""A text part of an answer (with a unit's exponent after it, ``\\text{ cm}^2``)."""
_NAME = re.compile(r"\s*(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?\w+\}?)?(?:\([^()]*\))?\s*")
"""What may stand on one side of an answer's equation without being compared: ``x``, ``a_n``, ``\\theta``,
``f(x)``."""


def _sides(answer: str) -> list[str]:
    """The sides of an answer's equation chain (``=`` and ``\\approx`` outside brackets); one side if none."""
    sides, depth, start = [], 0, 0
    text = answer.replace("\\approx", "=")
    for pos, char in enumerate(text):
        if char in "{([":
            depth += 1
        elif char in "})]":
            depth -= 1
        elif char == "=" and depth == 0:
            sides.append(text[start:pos])
            start = pos + 1
    return [*sides, text[start:]]


def _math_verify_equal(answer: str, gold: str) -> bool:
    """math-verify's equality, refusing hedged answers it would accept: a text part holding a number
    (``2 \\text{ (or 3)}``), an answer that changes without its text parts (``4 \\text{ if } n \\text{ even}``),
    and an equation chain with a side that is neither a name nor equal to the label (``5 = 4``,
    ``4 \\approx 5``); ``x = 4``, ``2 + 2 = 4``, ``4 \\text{ cm}^2`` stay right. A label with text or an
    equation of its own is compared as math-verify compares it."""
    if not _math_verify_parsed_equal(answer, gold):
        return False
    if not _TEXT.search(gold):
        texts = _TEXT.findall(answer)
        if any(any(c.isdigit() for c in text) for text in texts):
            return False
        bare = _TEXT.sub(" ", answer).strip()
        if texts and bare and not _math_verify_parsed_equal(bare, gold):
            return False
    sides = _sides(answer)
    if len(sides) > 1 and len(_sides(gold)) == 1:
        return all(_NAME.fullmatch(side) or _math_verify_parsed_equal(side, gold) for side in sides)
    return True


RULES = {"math_verify": _math_verify_equal, "paper": math_paper.grade}
"""Rule sets: (extracted answer, extracted gold answer) -> equal?"""


def grade(response: str, label: str, rules: str = "math_verify") -> bool:
    """True iff the last boxed answer of ``response`` equals ``label`` under ``rules`` (no time bound)."""
    if rules not in RULES:
        raise ValueError(f"unknown math rules {rules!r} (known: {', '.join(RULES)})")
    if not label:
        return False
    answer = last_boxed(response)
    gold = last_boxed(label) if _BOX in label else label
    if answer is None or gold is None:
        return False
    return RULES[rules](answer, gold)


class MathVerifier:
    """A pool of killable math-grader processes; ``verify`` is thread-safe."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        workers: int = 4
        """Grader processes (answers graded in parallel)."""
        timeout_s: float = 20.0
        """Wall-clock bound per answer; past it the worker is killed and the verdict is None."""
        startup_timeout_s: float = 180.0
        """Bound on a worker's start-up (importing math-verify and sympy)."""
        memory_limit_mb: int = 4096
        """Address-space limit of each worker (0: none); an answer that exceeds it gets verdict None."""
        rules: str = "math_verify"
        """Equality rules: math_verify (math-verify's parser and comparison) or paper (the paper's GRPO math
        reward: Hendrycks MATH normalisation + sympy); docs/verifiers.md lists where they differ."""

        def __post_init__(self) -> None:
            if self.rules not in RULES:
                raise ValueError(f"MathVerifier.Config.rules must be one of {', '.join(RULES)}, got {self.rules!r}")
            if self.memory_limit_mb < 0:
                raise ValueError(f"MathVerifier.Config.memory_limit_mb must be >= 0, got {self.memory_limit_mb}")
            if self.workers < 1:
                raise ValueError(f"MathVerifier.Config.workers must be >= 1, got {self.workers}")
            for name in ("timeout_s", "startup_timeout_s"):
                if not getattr(self, name) > 0:
                    raise ValueError(f"MathVerifier.Config.{name} must be > 0, got {getattr(self, name)}")

        def build(self) -> MathVerifier:
            return MathVerifier(self)

    def __init__(self, config: MathVerifier.Config | None = None) -> None:
        self.config = config or MathVerifier.Config()
        self._pool = GraderPool(functools.partial(grade, rules=self.config.rules), name="math",
                                workers=self.config.workers, timeout_s=self.config.timeout_s,
                                startup_timeout_s=self.config.startup_timeout_s,
                                memory_limit_mb=self.config.memory_limit_mb,
                                warmup=("\\boxed{\\sqrt{2}}", "x"))  # the LaTeX parser and sympy, before "ready"

    @property
    def failures(self) -> Counter[str]:
        """Counts of ``timeout`` / ``crash`` / ``error`` events, for metrics."""
        return self._pool.failures

    def verify(self, response: str, label: str) -> bool | None:
        """Verdict for one answer: True / False, or None when the grader timed out or failed."""
        verdict = self._pool.grade(response, label)
        return None if verdict is None else bool(verdict)

    def verify_batch(self, pairs: Sequence[tuple[str, str]]) -> list[bool | None]:
        """Verdicts for many ``(response, label)`` pairs, graded in parallel, in input order."""
        return [None if verdict is None else bool(verdict) for verdict in self._pool.grade_batch(pairs)]

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> MathVerifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
