"""Graders of the protocol: ``grade(row, responses) -> list[bool]`` per question, and a ``revision`` that keys
the grade cache (a change of rule or checker package invalidates cached grades).

``math`` (AIME: exceptions abort; MATH-500: exceptions are wrong), ``code`` (LiveCodeBench in the sandbox),
``ifeval`` (IFEval/IFBench strict prompt-level, deterministic). ``GraderError`` is an instrument failure:
grading stops rather than score it (``errors``; the grader modules are ``math``, ``code``, ``ifeval``).
"""

from __future__ import annotations

from dnmopd.eval.graders.errors import GraderError

__all__ = ["GraderError", "grader_for"]


def grader_for(catalog, *, nltk_data=None, code_options: dict | None = None):
    """The grader of a loaded catalog's suite."""
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
