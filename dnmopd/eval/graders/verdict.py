"""One answer's grade (`Verdict`), and the wrong verdict of an answer whose grading failed (`failed`)."""

from __future__ import annotations

from dataclasses import dataclass


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
