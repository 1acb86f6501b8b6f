"""AIME and MATH-500 grading: last complete box, math-verify equivalence, exception rules."""

import pytest

from dnmopd.eval.graders import GraderError
from dnmopd.eval.graders.math import MathGrader
from dnmopd.verifiers.math import last_boxed

AIME = {"id": "aime25:1", "answer": "345"}


@pytest.mark.parametrize(("text", "answer"), [
    ("so \\boxed{12}", "12"),
    ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{3} and an unclosed \\boxed{4", None),
    ("no box at all", None),
    ("only \\fbox{7}", None),  # only a \boxed is unwrapped
])
def test_the_answer_is_the_content_of_the_last_complete_box(text, answer):
    assert last_boxed(text) == answer


@pytest.mark.parametrize(("response", "right"), [
    ("The answer is \\boxed{345}.", True),
    ("\\boxed{345.0}", True),
    ("\\boxed{0345}", True),
    ("$\\boxed{345}$", True),
    ("first \\boxed{345}, finally \\boxed{346}", False),  # an earlier box is ignored
    ("\\boxed{346}", False),
    ("\\boxed{345", False),  # unclosed: no complete box
    ("345", False),
    ("\\fbox{345}", False),
])
def test_aime(response, right):
    assert MathGrader("aime").grade(AIME, [response]) == [right]


def test_aime_refuses_a_gold_answer_that_does_not_parse():
    with pytest.raises(GraderError, match="does not parse"):
        MathGrader("aime").grade({"id": "aime25:x", "answer": ""}, ["\\boxed{1}"])


@pytest.mark.parametrize(("answer", "response", "right"), [
    ("(3,2)", "\\boxed{(3, 2)}", True),
    ("9\\pi", "\\boxed{9\\pi}", True),
    ("p-q", "\\boxed{q-p}", False),
    ("\\frac{14}{3}", "\\boxed{4.6667}", False),
    ("\\frac{14}{3}", "\\boxed{\\frac{28}{6}}", True),
])
def test_math500(answer, response, right):
    assert MathGrader("math500").grade({"id": "m", "answer": answer}, [response]) == [right]


def test_math500_counts_grader_exceptions_as_wrong(monkeypatch):
    import math_verify

    def broken(*args, **kwargs):
        raise RuntimeError("sympy blew up")

    monkeypatch.setattr(math_verify, "verify", broken)
    assert MathGrader("math500").grade({"id": "m", "answer": "1"}, ["\\boxed{1}"]) == [False]
    with pytest.raises(RuntimeError, match="blew up"):
        MathGrader("aime").grade(AIME, ["\\boxed{345}"])
