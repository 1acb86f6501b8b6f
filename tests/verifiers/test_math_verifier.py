"""Math verifier: last-box extraction, equivalence on answer pairs, time bound and failures -> None, dispatch."""

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
    ("\\boxed{}", "42", False),
    ("\\boxed{42}", "", False),  # empty label
    ("\\boxed{\\text{banana}}", "42", False),
    ("\\boxed{(2,1)}", "(1,2)", False),
]


@pytest.fixture(scope="module")
def grader():
    with MathVerifier(MathVerifier.Config(workers=2, timeout_s=20)) as pool:
        yield pool


def test_last_boxed_extraction():
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{a}{\\sqrt{b}}} c") == "\\frac{a}{\\sqrt{b}}"
    assert last_boxed("no box here") is None
    assert last_boxed("\\boxed{1} \\boxed{2") is None
    assert last_boxed("\\boxed{}") == ""


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
        start = pool._new_worker

        def broken():
            raise OSError("cannot start a process")

        monkeypatch.setattr(pool, "_new_worker", broken)
        for _ in range(3):  # more failures than workers: each raises, none leaves a caller waiting forever
            with pytest.raises(OSError, match="cannot start"):
                pool.verify(r"\boxed{4}", "4")
        monkeypatch.setattr(pool, "_new_worker", start)
        assert pool.verify(r"\boxed{4}", "4") is True
