"""AIME and MATH-500: math-verify on the content of the last complete ``\\boxed{...}``.

The answer is located as in the G-OPD evaluation the paper used, by the training verifier's own
``dnmopd.verifiers.math.last_boxed``: the content of the last ``\\boxed{...}``, braces balanced; an answer
whose last ``\\boxed`` is unclosed, or that has only an ``\\fbox``, is wrong (no earlier box is tried). Gold
and prediction are both parsed as ``\\boxed{...}`` and compared with ``math_verify.verify``. AIME: the gold
must parse and any grader exception propagates (an instrument failure is never a wrong answer); MATH-500: an
exception counts as wrong.
math-verify bounds each parse and comparison with its own 5 s alarm, so grading runs in the main thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import version

from dnmopd.eval.graders.errors import GraderError
from dnmopd.verifiers.math import last_boxed


class MathGrader:
    def __init__(self, kind: str):
        if kind not in ("aime", "math500"):
            raise ValueError(f"MathGrader kind must be aime or math500, got {kind!r}")
        self.kind = kind
        self.revision = f"{kind}-last-boxed-v1+math-verify=={version('math-verify')}"

    def grade(self, row: dict, responses: Sequence[str]) -> list[bool]:
        from math_verify import parse, verify

        gold = parse("\\boxed{" + str(row["answer"]) + "}")
        if not gold and self.kind == "aime":
            raise GraderError(f"{row['id']}: the reference answer {row['answer']!r} does not parse")
        verdicts = []
        for text in responses:
            predicted = last_boxed(text)
            if predicted is None:
                verdicts.append(False)
            elif self.kind == "aime":
                verdicts.append(bool(verify(gold, parse("\\boxed{" + predicted + "}"))))
            else:
                try:
                    verdicts.append(bool(verify(gold, parse("\\boxed{" + predicted + "}"))))
                except Exception:
                    verdicts.append(False)
        return verdicts
