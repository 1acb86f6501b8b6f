"""Graders of the protocol: ``grade(row, responses) -> list[Verdict]`` per question, and a ``revision`` that
keys the grade cache (a change of rule or checker package invalidates cached grades).

``math`` (AIME, MATH-500), ``code`` (LiveCodeBench under the official runner's rules, in the sandbox),
``ifeval`` (IFEval/IFBench strict and loose, deterministic). Model output is hostile input: whatever an
answer makes a checker do, that answer is scored wrong with the error in its ``Verdict`` (counted in the
suite's ``eval_failures``) and grading goes on. ``GraderError`` is an instrument failure that no answer caused
(an unparseable reference answer, an unimplemented instruction, missing NLTK data or test files, weaker
sandbox isolation than asked): grading stops rather than score it. Modules: ``verdict`` (`Verdict`), ``errors``
(`GraderError`), the graders ``math``, ``code``, ``ifeval`` (``ifbench_pinned``: IFBench's pinned checkers).
"""

from __future__ import annotations

from dnmopd.eval.graders.errors import GraderError
from dnmopd.eval.graders.verdict import Verdict, failed

__all__ = ["GraderError", "Verdict", "failed", "grader_for"]


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
