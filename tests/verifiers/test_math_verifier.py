"""Math verifier: last-box extraction, both rule sets on answer pairs, time bound and failures -> None, dispatch."""

from __future__ import annotations

import threading
import time

import psutil
import pytest

from dnmopd.verifiers import Verifiers
from dnmopd.verifiers.math import MathVerifier, last_boxed

PAIRS = [  # (response, label, correct?)
    ("so \\boxed{\\frac{3}{4}}", "0.75", True),
    ("\\boxed{0.75}", "\\frac{3}{4}", True),
    ("\\boxed{3/4}", "\\frac{3}{4}", True),
    ("\\boxed{\\dfrac{1}{12}}", "\\frac{1}{12}", True),
    ("\\boxed{36 \\pi}", "36\\pi", True),
    ("\\boxed{\\sqrt{32}}", "4\\sqrt{2}", True),
    ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{\\sqrt{2}}{2}", True),  # nested braces
    ("The answer is $\\boxed{345}$.", "345", True),
    ("\\boxed{345.0}", "345", True),
    ("\\boxed{0345}", "345", True),
    ("\\boxed{-44/7}", "-\\frac{44}{7}", True),
    ("\\boxed{(x+1)^2}", "x^2+2x+1", True),
    ("\\boxed{\\frac{138}{5}}", "27.6", True),
    ("first \\boxed{41}, then corrected: \\boxed{42}", "42", True),
    ("\\boxed{42}", "\\boxed{42}", True),  # a boxed label is unwrapped
    ("\\boxed{\\left(1, 2\\right)}", "(1,2)", True),
    ("\\boxed{41}", "42", False),
    ("\\boxed{4.6667}", "\\frac{14}{3}", False),
    ("\\boxed{q-p}", "p-q", False),
    ("\\boxed{42} and later \\boxed{41}", "42", False),  # only the last box counts
    ("The answer is 42.", "42", False),  # no box
    ("\\boxed{42", "42", False),  # unclosed box
    ("\\boxed{42} and finally \\boxed{41", "42", False),  # the last box is cut off: no answer
    ("\\boxed{42} and finally \\boxed", "42", False),
    ("\\boxed{}", "42", False),
    ("\\boxed{42}", "", False),  # empty label
    ("\\boxed{\\text{banana}}", "42", False),
    ("\\boxed{(2,1)}", "(1,2)", False),
]


# (response, label, paper, math_verify): the paper's verdict derived by hand from reference-behavior 6.2
# (H = Hendrycks normalisation makes both strings equal; S = the sympy normalisation and its element rules).
RULE_PAIRS = [
    ("\\boxed{5!}", "120", False, True),  # S: an integer never equals a non-integer text ("5!")
    ("\\boxed{2^{10}}", "1024", False, True),  # S: braces dropped, "2^10" is not an integer text
    ("\\boxed{\\frac24}", "\\frac12", False, True),  # H: \frac{2}{4} vs \frac{1}{2}; S: fractions compared as text
    ("\\boxed{6/8}", "\\frac{3}{4}", False, True),  # S: "6/8" vs "3/4", an unreduced fraction is wrong
    ("\\boxed{1, 2, 3}", "3, 2, 1", False, True),  # S: no brackets, one element each, sympy cannot subtract tuples
    ("\\boxed{a+b+c}", "c+b+a", False, True),  # S: three distinct letters: sympy is not asked
    ("\\boxed{x \\in [0,1]}", "[0,1]", False, True),  # S: "x∈[0,1]" is not a bracketed interval
    ("\\boxed{1e3}", "1000", True, False),  # S: a float that is an integer is written as one: "1000"
    ("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", True, True),  # H: dfrac -> frac
    ("\\boxed{0.5}", "\\frac{1}{2}", True, True),  # H: "0.5" -> \frac{1}{2}
    ("\\boxed{3/4}", "\\frac{3}{4}", True, True),  # H: a/b -> \frac{a}{b}
    ("\\boxed{x = 5}", "5", True, True),  # H: a short "x =" prefix is dropped
    ("\\boxed{10\\%}", "10", True, True),  # H: \% removed
    ("\\boxed{\\$5}", "5", True, True),  # H: \$ removed
    ("\\boxed{90^\\circ}", "90", True, True),  # H: degrees removed
    ("\\boxed{5 \\text{ cm}}", "5", True, True),  # H: units after "\text{ " removed
    ("\\boxed{12 \\text{ seconds}}", "12", True, True),
    ("\\boxed{\\text{Yes}}", "yes", True, True),  # S: lower case
    ("\\boxed{\\text{(B)}}", "B", True, True),  # S: "(b)" is a one-element tuple; sympy: b - b = 0
    ("\\boxed{1,000}", "1000", True, True),  # S: thousands separators
    ("\\boxed{5}", "5.0", True, True),  # S: "5.0" -> "5"
    ("\\boxed{0345}", "345", True, True),
    ("\\boxed{(1,2)}", "(1, 2)", True, True),  # H: spaces removed
    ("\\boxed{\\left(1,2\\right)}", "(1,2)", True, True),  # H: \left and \right removed
    ("\\boxed{[1,2]}", "(1,2)", False, False),  # S: tuples need the same brackets
    ("\\boxed{(2,1)}", "(1,2)", False, False),  # S: element by element, in order
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", True, True),  # S: sympy: sqrt(8) - 2 sqrt(2) = 0
    ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt{2}}{2}", True, True),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", True, True),  # S: sympy expands the difference to 0
    ("\\boxed{7 \\frac{3}{4}}", "\\frac{31}{4}", True, True),  # S: a mixed number is a sum
    ("\\boxed{\\frac{138}{5}}", "27.6", True, True),  # S: not both fractions: sympy
    ("\\boxed{-\\frac{44}{7}}", "-44/7", True, True),
    ("\\boxed{\\frac{1}{3}}", "0.333", False, False),  # S: sympy: 1/3 - 0.333 != 0
    ("\\boxed{\\pi}", "3.14159", False, False),
    ("\\boxed{2 million}", "2000000", False, False),  # S: "2*10^6" is not an integer text
    ("\\boxed{9^{9^{9}}}", "x", False, False),  # S: a power tower ("9^9^9"): sympy is not asked
    ("\\boxed{q-p}", "p-q", False, False),
    ("\\boxed{7}", "\\boxed{7}", True, True),  # a boxed label is unwrapped
    ("\\boxed{3} and then \\boxed{4", "3", False, False),  # the last box is cut off: no answer
    ("\\boxed{3} and then \\boxed 4", "3", False, False),  # "\boxed 4" is not a box
    ("The answer is 5.", "5", False, False),  # no box
    ("\\boxed{}", "0", False, False),
    ("\\boxed{5}", "", False, False),  # empty label
    # hedged or self-contradicting answers: the default rules refuse them, the paper's keep its own verdict
    ("\\boxed{2 \\text{ (or 3)}}", "2", True, False),  # H: everything after "\\text{ " is a unit
    ("\\boxed{5 = 4}", "4", True, False),  # H: a short "5 =" prefix is dropped
    ("\\boxed{2 \\text{ or } 3}", "2", True, False),
    ("\\boxed{2 \\text{ and } 3}", "2", True, False),
    ("\\boxed{2 \\text{ (approximately 3)}}", "2", True, False),
    ("\\boxed{2 \\text{ (} 3 \\text{)}}", "2", True, False),
    ("\\boxed{4 \\text{ (or } 5\\text{)}}", "4", True, False),
    ("\\boxed{4 \\text{ if } n \\text{ even}}", "4", False, False),
    ("\\boxed{4 \\textbf{ or 5}}", "4", False, False),
    ("\\boxed{4 \\approx 5}", "4", False, False),
    ("\\boxed{2 or 3}", "2", False, False),
    ("\\boxed{2, 3}", "2", False, False),
    ("\\boxed{2 \\pm 1}", "2", False, False),
    ("\\boxed{x = 2 \\text{ or } x = 3}", "2", True, False),
    # and what the hedge rules leave right
    ("\\boxed{k = 4}", "4", True, True),
    ("\\boxed{2+2 = 4}", "4", False, True),
    ("\\boxed{f(x) = 4}", "4", False, True),
    ("\\boxed{4\\text{ cm}^2}", "4", True, True),
    ("\\boxed{4 \\text{ (exactly)}}", "4", True, True),
]


@pytest.fixture(scope="module")
def grader():
    with MathVerifier(MathVerifier.Config(workers=2, timeout_s=20)) as pool:
        yield pool


def test_last_boxed_extraction():
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{a}{\\sqrt{b}}} c") == "\\frac{a}{\\sqrt{b}}"
    assert last_boxed("no box here") is None
    assert last_boxed("\\boxed{1} \\boxed{2") is None
    assert last_boxed("\\boxed{1} and the answer is \\boxed") is None  # not the earlier, complete box
    assert last_boxed("\\boxed{1} \\boxed {2}") is None
    assert last_boxed("\\boxed{\\boxed{3}}") == "3"
    assert last_boxed("\\boxed{}") == ""


@pytest.mark.parametrize("rules, column", [("paper", 2), ("math_verify", 3)])
def test_each_rule_set_in_its_killable_workers(rules, column):
    with MathVerifier(MathVerifier.Config(workers=2, timeout_s=20, rules=rules)) as pool:
        verdicts = pool.verify_batch([(response, label) for response, label, *_ in RULE_PAIRS])
        assert not pool.failures
    expected = [pair[column] for pair in RULE_PAIRS]
    assert [(pair[:2], v) for pair, v in zip(RULE_PAIRS, verdicts, strict=True)] == \
        [(pair[:2], v) for pair, v in zip(RULE_PAIRS, expected, strict=True)]


def test_paper_rules_are_bounded_like_the_default():
    with MathVerifier(MathVerifier.Config(workers=1, timeout_s=2, rules="paper")) as pool:
        start = time.monotonic()
        assert pool.verify("\\boxed{9**9**9}", "x") is None  # sympy would build 9^387420489
        assert time.monotonic() - start < 10 and pool.failures["timeout"] == 1
        assert pool.verify("\\boxed{\\frac{1}{2}}", "0.5") is True


def test_answer_pairs(grader):
    verdicts = grader.verify_batch([(response, label) for response, label, _ in PAIRS])
    assert verdicts == [expected for _, _, expected in PAIRS]
    assert not grader.failures


def test_hung_comparison_times_out_to_none_and_the_pool_recovers():
    with MathVerifier(MathVerifier.Config(workers=1, timeout_s=2)) as pool:
        assert pool.verify("\\boxed{2}", "2") is True  # the worker is up
        start = time.monotonic()
        assert pool.verify("\\boxed{9^{9^{9^{9}}}}", "1") is None  # sympy would run for hours
        assert time.monotonic() - start < 10
        assert pool.failures["timeout"] == 1
        assert pool.verify("\\boxed{5}", "5") is True  # a fresh worker took over


def grader_processes() -> set[int]:
    return {p.pid for p in psutil.Process().children() if "spawn_main" in " ".join(p.cmdline())}


def test_a_killed_worker_gives_none_not_false():
    others = grader_processes()
    with MathVerifier(MathVerifier.Config(workers=1, timeout_s=60)) as pool:
        assert pool.verify("\\boxed{1}", "1") is True
        verdict = []
        thread = threading.Thread(target=lambda: verdict.append(pool.verify("\\boxed{9^{9^{9^{9}}}}", "1")))
        thread.start()
        time.sleep(1.0)
        ours = grader_processes() - others
        assert len(ours) == 1
        psutil.Process(ours.pop()).kill()
        thread.join(timeout=30)
        assert verdict == [None] and pool.failures["crash"] == 1
        assert pool.verify("\\boxed{7}", "7") is True


def test_config_validation():
    with pytest.raises(ValueError, match="workers"):
        MathVerifier.Config(workers=0)
    with pytest.raises(ValueError, match="timeout_s"):
        MathVerifier.Config(timeout_s=0)
    with pytest.raises(ValueError, match="rules must be one of math_verify, paper, got 'sympy'"):
        MathVerifier.Config(rules="sympy")


def test_dispatch_by_domain():
    with Verifiers(domains=("math", "ifeval")) as verifiers:
        verify = verifiers.verify
        assert verify("MATH", "\\boxed{\\frac{1}{2}}", "0.5") is True
        assert verify("math", "\\boxed{3}", "2") is False
        assert verify("ifeval", "HELLO<|im_end|>", '[{"type": "all_caps"}]') is True
        assert verify("IFEval", "hello", '[{"type": "all_caps"}]') is False
        with pytest.raises(KeyError):
            verify("ifeval", "x", '[{"type": "nope"}]')
        with pytest.raises(ValueError, match="no verifier for domain 'physics'"):
            verify("physics", "x", "y")
    with pytest.raises(ValueError, match="no verifier for domain 'physics'"):
        Verifiers(domains=("physics",))


def test_dispatch_to_the_code_judge():
    code = pytest.importorskip("dnmopd.verifiers.code")
    label = '{"inputs": ["2 3\\n"], "outputs": ["5\\n"]}'
    good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    with Verifiers(domains=("code",)) as verifiers, code.CodeJudge() as judge:
        assert verifiers.verify("code", good, label) is judge.judge(good, label) is True
        assert verifiers.verify("code", good.replace("a + b", "a * b"), label) is False


def test_a_worker_that_fails_to_start_frees_its_slot(monkeypatch):
    with MathVerifier(MathVerifier.Config(workers=1, timeout_s=20)) as pool:
        start = pool._pool._new_worker

        def broken():
            raise OSError("cannot start a process")

        monkeypatch.setattr(pool._pool, "_new_worker", broken)
        for _ in range(3):  # more failures than workers: each raises, none leaves a caller waiting forever
            with pytest.raises(OSError, match="cannot start"):
                pool.verify(r"\boxed{4}", "4")
        monkeypatch.setattr(pool._pool, "_new_worker", start)
        assert pool.verify(r"\boxed{4}", "4") is True
