"""AIME and MATH-500: math-verify on the content of the last complete ``\\boxed{...}``.

The answer is located as in the G-OPD evaluation the paper used, by the training verifier's own
``dnmopd.verifiers.math.last_boxed``: the content of the last ``\\boxed{...}``, braces balanced; an answer
whose last ``\\boxed`` is unclosed, or that has only an ``\\fbox``, is wrong (no earlier box is tried). Gold
and prediction are both parsed as ``\\boxed{...}`` and compared with ``math_verify.verify``. The gold must
parse (AIME; else grading stops: an instrument failure is never a wrong answer). An exception while parsing
or comparing an answer scores that answer wrong with the error in its `Verdict` (the paper's AIME grader
stopped there instead; docs/evaluation.md). Each answer's ``vote`` is its class for cons@n.
math-verify bounds each parse and comparison with its own 5 s alarm, so grading runs in the main thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import version

from dnmopd.eval.graders.errors import GraderError
from dnmopd.eval.graders.verdict import Verdict, failed
from dnmopd.verifiers.math import last_boxed

CORRECT_VOTE = "="
"""The vote of every answer equal to the reference (they are one class in the majority vote)."""


class MathGrader:
    measures = ("consensus",)

    def __init__(self, kind: str):
        if kind not in ("aime", "math500"):
            raise ValueError(f"MathGrader kind must be aime or math500, got {kind!r}")
        self.kind = kind
        self.revision = f"{kind}-last-boxed-v2+math-verify=={version('math-verify')}"

    def grade(self, row: dict, responses: Sequence[str]) -> list[Verdict]:
        from math_verify import parse, verify

        gold = parse("\\boxed{" + str(row["answer"]) + "}")
        if not gold and self.kind == "aime":
            raise GraderError(f"{row['id']}: the reference answer {row['answer']!r} does not parse")
        verdicts = []
        for text in responses:
            predicted = last_boxed(text)
            if predicted is None:
                verdicts.append(Verdict(False))
                continue
            try:
                correct = bool(verify(gold, parse("\\boxed{" + predicted + "}")))
            except Exception as error:  # noqa: BLE001 - one answer's failure is that answer's
                verdicts.append(failed(error, f"{row['id']}: math-verify"))
                continue
            verdicts.append(Verdict(correct, vote=CORRECT_VOTE if correct else predicted.strip()))
        return verdicts
