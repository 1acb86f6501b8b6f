"""Every verifier the trainer runs in its own process answers within its deadline: the killable worker pool
stops a check that runs past it (verdict None, counted), and pathological 100,000-character answers against
every IF check and the math grader come back within the deadline; the IF checks with a verdict."""

from __future__ import annotations

import functools
import json
import re
import time

import pytest

from dnmopd.verifiers.ifeval import CONSTRAINT_TYPES, IfVerifier
from dnmopd.verifiers.math import MathVerifier
from dnmopd.verifiers.workers import GraderPool

SIZE = 100_000
SLACK_S = 2.0  # process scheduling on a busy 2-core machine; the deadline itself is what the pool enforces
PARAMS = {"n": 3, "values": ["e"], "value": "Answer:", "open": "<<", "close": ">>"}
EVERY_CHECK = json.dumps([{"type": kind, **{p: PARAMS[p] for p in t.params}} for kind, t in CONSTRAINT_TYPES.items()])
PATHOLOGICAL_IF = {  # one answer per shape the checks' patterns scan; each SIZE characters
    "whitespace": " " * SIZE,
    "whitespace after a brace": "{" + " " * (SIZE - 1),  # valid_json was quadratic in such a run
    "whitespace then a fence": " " * (SIZE - 3) + "```",
    "newlines and spaces": "\n " * (SIZE // 2),
    "a bullet and whitespace": "- " + " " * (SIZE - 2),
    "numbered item digits": "1" * (SIZE - 1) + ".",
    "unclosed highlight": "**" + "a" * (SIZE - 2),
    "highlight markers": "*" * SIZE,
    "placeholder brackets": "[" * SIZE,
    "nested JSON": "[" * (SIZE // 2) + "]" * (SIZE // 2),
    "end-of-turn markers": "<|im_end|> " * (SIZE // 11),
    "look-alike letters and invisible characters": "l\u0430\u200b\u0435\u0301" * (SIZE // 5),
    "sentence breaks": ". " * (SIZE // 2),
    "commas and quotes": ",'" * (SIZE // 2),
}
PATHOLOGICAL_MATH = {
    "a power tower": "\\boxed{" + "9^{" * 20_000 + "9" + "}" * 20_000 + "}",
    "nested brackets": "\\boxed{" + "(" * (SIZE // 2) + ")" * (SIZE // 2) + "}",
    "a long sum": "\\boxed{" + "1+" * (SIZE // 2) + "1}",
    "nested fractions": "\\boxed{" + "\\frac{1}{" * (SIZE // 9) + "1" + "}" * (SIZE // 9) + "}",
}


def timed(call, *args):
    start = time.monotonic()
    result = call(*args)
    return result, time.monotonic() - start


def test_the_pool_stops_a_check_past_its_deadline_and_recovers():
    slow = functools.partial(re.sub, r"(a+)+b", "")  # catastrophic backtracking: hours on 40 a's
    pool = GraderPool(slow, name="regex", workers=1, timeout_s=1.0, startup_timeout_s=60)
    try:
        assert pool.grade("aab") is not None  # the worker is up
        verdict, elapsed = timed(pool.grade, "a" * 40)
        assert verdict is None and elapsed < 1.0 + SLACK_S and pool.failures["timeout"] == 1
        assert pool.grade("ab") is not None  # a fresh worker took over
    finally:
        pool.close()


def test_pathological_answers_get_an_if_verdict_within_the_deadline():
    timeout = 2.0
    with IfVerifier(IfVerifier.Config(workers=1, timeout_s=timeout)) as verifier:
        assert verifier.verify("x", EVERY_CHECK) is False  # the worker is up
        for name, answer in PATHOLOGICAL_IF.items():
            assert len(answer) >= SIZE - 10, name
            verdict, elapsed = timed(verifier.verify, answer, EVERY_CHECK)
            assert verdict is False and elapsed < timeout + SLACK_S, (name, verdict, elapsed)
        assert not verifier.failures


@pytest.mark.parametrize("rules", ["math_verify", "paper"])
def test_pathological_answers_end_within_the_math_deadline(rules):
    timeout = 2.0
    with MathVerifier(MathVerifier.Config(workers=1, timeout_s=timeout, rules=rules)) as verifier:
        assert verifier.verify("\\boxed{2}", "2") is True  # the worker is up
        for name, answer in PATHOLOGICAL_MATH.items():
            verdict, elapsed = timed(verifier.verify, answer, "2")
            assert verdict is not True and elapsed < timeout + SLACK_S, (name, verdict, elapsed)
