"""Graders of the protocol: ``grade(row, responses) -> list[Verdict]`` per question, and a ``revision`` that
keys the grade cache (a change of rule or checker package invalidates cached grades).

``math`` (AIME, MATH-500), ``code`` (LiveCodeBench under the official runner's rules, in the sandbox),
``ifeval`` (IFEval/IFBench strict and loose, deterministic). Model output is hostile input: whatever an
answer makes a checker do, that answer is scored wrong with the error in its ``Verdict`` (counted in the
suite's ``eval_failures``) and grading goes on. ``GraderError`` is an instrument failure that no answer caused
(an unparseable reference answer, an unimplemented instruction, missing NLTK data or test files, weaker
sandbox isolation than asked): grading stops rather than score it.
"""

from __future__ import annotations

from dataclasses import dataclass


class GraderError(RuntimeError):
    """The grader itself cannot grade (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """One answer's grade."""

    correct: bool
    """The suite's verdict (IFEval/IFBench: strict)."""
    loose: bool | None = None
    """IFEval/IFBench: the official loose verdict (the answer, or it with its first and/or last line removed
    and/or its asterisks deleted, follows each instruction); None elsewhere."""
    vote: str | None = None
    """AIME/MATH-500: the answer's class in the majority vote of cons@n (``"="`` for an answer equal to the
    reference, else the stripped content of its last box); None for an answer without a complete box."""
    error: str | None = None
    """What failed while grading this answer (it is then wrong); None when grading went through."""


def failed(error: BaseException, what: str) -> Verdict:
    """A wrong verdict that says what failed: ``what`` and the exception's type and message."""
    return Verdict(False, error=f"{what} raised {type(error).__name__}: {error}"[:2000])


def grader_for(catalog, *, nltk_data=None, code_options: dict | None = None):
    """The grader of a catalog's suite (``code_options``: `LCBGrader`'s keyword arguments)."""
    from dnmopd.eval.protocol import SUITES

    kind = SUITES[catalog.suite].grader
    if kind in ("aime", "math500"):
        from dnmopd.eval.graders.math import MathGrader

        return MathGrader(kind)
    if kind == "lcb":
        from dnmopd.eval.graders.code import LCBGrader

        return LCBGrader(catalog, **(code_options or {}))
    from dnmopd.eval.graders.ifeval import IFGrader

    return IFGrader(catalog.suite, nltk_data=nltk_data)
