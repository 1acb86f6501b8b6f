"""AIME and MATH-500 grading: last complete box, math-verify equivalence, failures, votes, pass@k/cons@n."""

from math import comb

import pytest

from dnmopd.eval.grade import consensus
from dnmopd.eval.graders import GraderError, Verdict
from dnmopd.eval.graders.math import MathGrader
from dnmopd.eval.scores import pass_at_k, suite_summary
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
    assert [v.correct for v in MathGrader("aime").grade(AIME, [response])] == [right]


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
    assert [v.correct for v in MathGrader("math500").grade({"id": "m", "answer": answer}, [response])] == [right]


def test_a_grader_exception_scores_that_answer_wrong_and_names_it(monkeypatch):
    import math_verify

    def broken(*args, **kwargs):
        raise RuntimeError("sympy blew up")

    monkeypatch.setattr(math_verify, "verify", broken)
    for kind, row in (("math500", {"id": "m", "answer": "1"}), ("aime", AIME)):
        [verdict] = MathGrader(kind).grade(row, ["\\boxed{1}"])
        assert not verdict.correct and "math-verify raised RuntimeError: sympy blew up" in verdict.error


def test_votes_and_the_majority():
    verdicts = MathGrader("aime").grade(AIME, ["\\boxed{345}", "\\boxed{0345}", "\\boxed{7} ", "\\boxed{ 7}",
                                              "\\boxed{7}", "no box"])
    assert [v.vote for v in verdicts] == ["=", "=", "7", "7", "7", None]
    assert not consensus(verdicts)  # 7 has three votes, the two right answers two
    assert consensus(verdicts[:4])  # a tie goes to the class voted first
    assert not consensus([Verdict(False), Verdict(False)])  # nobody voted


def test_pass_at_k_is_the_unbiased_estimator():
    for n, c, k in ((4, 0, 1), (4, 1, 2), (64, 3, 8), (6, 6, 3)):
        chance_all_wrong = comb(n - c, k) / comb(n, k)
        assert pass_at_k(n, c, k) == 1 - chance_all_wrong
    assert pass_at_k(4, 2, 1) == 0.5  # pass@1 is the fraction correct
    records = [{"id": "aime25:1", "n": 4, "correct": "0100", "mean_tokens": 1.0, "cap_hits": 0, "consensus": False,
                "errors": []},
               {"id": "aime25:2", "n": 4, "correct": "1111", "mean_tokens": 1.0, "cap_hits": 0, "consensus": True,
                "errors": [{"answer": 2, "error": "x"}]}]
    summary = suite_summary("aime25", records, grader_revision="r", deviations=[])
    assert summary["pass_at_k"] == {"1": 62.5, "2": 75.0, "4": 100.0}
    assert summary["cons_at_n"] == 50.0 and summary["score"] == summary["pass_at_k"]["1"]
    assert summary["eval_failures"] == 1 and summary["failures"] == [{"id": "aime25:2", "answer": 2, "error": "x"}]
