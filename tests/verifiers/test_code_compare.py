"""The code verifier's comparison rules: ``per_test`` (exact where the expected value is exact) and the
paper's judge, case by case and against numpy's float64 ``isclose`` as the tolerance reference; model
output of any size or nesting never raises."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from dnmopd.sandbox import Opaque
from dnmopd.verifiers.code_compare import outputs_match, paper_outputs_match, paper_returns_match, returns_match

HUGE = "9" * 5000  # over Python's 4300-digit int() limit
NINES = 10 ** 5000 - 1


@pytest.mark.parametrize(("got", "want", "per_test", "paper"), [
    ("3\n", "3", True, True),
    ("  1 2 \n\n 3\n\n", "1 2\n3\n", True, False),       # the paper strips expected lines, not output lines
    ("  1 2 \n 3\n", "1 2\n3\n", True, True),
    ("1\n2 3\n", "1 2\n3\n", True, False),            # per_test compares tokens; the paper compares lines
    ("1 2 3", "1\n2\n3", True, False),
    ("0.333333\n", "0.3333333333\n", True, True),     # close floats
    ("YES 0.5000001", "YES 0.5", True, False),       # the paper converts whole lines only
    ("0.34\n", "0.3333333333\n", False, False),
    ("1000001\n", "1000000\n", False, False),         # digit-only lines are exact in both
    ("-500001\n", "-500000\n", False, True),          # the paper's isdigit() misses the sign: float tolerance
    ("+500001\n", "500000\n", False, True),
    ("2.880067194370816e+18\n", "2880067194370816120\n", False, True),  # an integer printed as a float
    ("1000001\n0.5\n", "1000000\n0.5\n", False, True),  # one float line makes the paper compare all as floats
    ("-500000\n", "-500000\n", True, True),
    ("+7 -0 007\n", "7 0 7\n", False, False),         # per_test: an expected integer needs the same text
    ("00000101\n", "101\n", False, False), ("101 00000101", "101 101", False, False),
    ("101.0 0.5\n", "101 0.5\n", False, False), ("101.0\n0.5\n", "101\n0.5\n", False, True),
    ("007.5\n", "7.5\n", False, True), ("0.5 7 -0.25\n", "0.50 7.0 -.25\n", True, False),
    ("2\n", "2.0\n", True, True),                     # an expected float accepts an integer token
    ("1.0\n", "1\n", False, True),                    # an expected integer does not accept a float token
    ("1e5\n", "100000.0\n", True, True),
    ("3 2 1", "1 2 3", False, False),                 # order matters (the paper's set rule never passes)
    ("1 1 2", "1 2", False, False),
    ("nan", "nan", True, True), ("nan", "0.0", False, False), ("inf", "1e308", False, False),
    ("inf\n", "inf\n", True, True), ("-inf 1.0", "inf 1.0", False, False),
    ("a\r\nb\r\n", "a\nb\n", True, True),
    ("", "0", False, False), ("\n\n", "", True, True),
    (HUGE + "\n", HUGE + "\n", True, True), (HUGE + "8", HUGE + "9", False, False),
    ("0" + HUGE, HUGE, False, False),
])
def test_stdout_rules(got, want, per_test, paper):
    assert outputs_match(got, want) is per_test
    assert paper_outputs_match(got, want) is paper


def test_the_float_tolerance_is_numpys_allclose():
    rng = random.Random(7)
    for _ in range(3000):
        want = rng.choice([rng.uniform(-1e6, 1e6), rng.uniform(-1, 1) * 10.0 ** rng.randint(-12, 12)])
        got = want * (1 + rng.choice([-1, 1]) * 10.0 ** rng.uniform(-9, -3)) + rng.choice([0, 1e-9, -3e-8])
        reference = bool(np.isclose(float(repr(got)), float(repr(want)), rtol=1e-5, atol=1e-8))
        assert outputs_match(repr(got), repr(want)) is reference, (got, want)
        assert paper_outputs_match(repr(got), repr(want)) is reference, (got, want)


@pytest.mark.parametrize(("got", "want", "per_test", "paper"), [
    ([0, 1], [0, 1], True, True),
    ([0, 1], [[0, 1]], True, True),                   # the one-element wrapper
    (0, [0, 1], False, True),                         # two_sum returning one index: the paper takes any first
    (7, [7], True, True), (7, [8], False, False),
    (True, 1, False, True), (1, True, False, True),  # booleans are not integers (the paper uses ==)
    (True, [True], True, True), (False, [0], False, True),
    (1.0, 1, False, True), (2, 2.0, True, True), (1 / 3, 0.3333333, True, False),
    ((1, 2), [1, 2], True, True), ([(1, 2)], [[[1, 2]]], True, True),
    ({1: "a"}, {"1": "a"}, True, True),               # the paper turns expected dict keys into ints
    ({1: "a", "1": "b"}, {"1": "b"}, False, False),
    ({"1": "a"}, {"1": "a"}, True, False),
    ({1, 2}, [1, 2], False, False), ([1, 2], [[2, 1]], False, False),
    (None, None, True, True), (None, [None], True, True), (None, [0], False, False),
    ([], [], True, True), ("7", 7, False, False),
    (Opaque("Always"), 1, False, False), ([Opaque("Always")], [[1]], False, False),
    (NINES, int("9" * 4000) * 10 ** 1000 + 10 ** 1000 - 1, True, True), (NINES, [NINES - 1], False, False),
], ids=lambda value: "huge" if isinstance(value, int) and value.bit_length() > 10000 else None)
def test_return_value_rules(got, want, per_test, paper):
    assert returns_match(got, want) is per_test
    assert paper_returns_match(got, want) is paper


def deep(depth: int, leaf=1):
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def test_deep_and_huge_values_give_a_verdict_not_an_exception():
    for compare in (returns_match, paper_returns_match):
        assert compare(deep(100_000), deep(100_000)) is False  # too deep to compare: wrong, not a crash
        assert compare(deep(50), deep(50)) is True
        assert compare({NINES: 1}, {"1": 1}) is False
        assert compare(deep(10, float("nan")), deep(10, float("nan"))) is False
    assert outputs_match("1 " * 200_000, "1 " * 200_000 + "2") is False


def random_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(12 if depth < 4 else 7)
    scalars = [None, True, False, rng.randint(-10**30, 10**30), rng.random() * 10 ** rng.randint(-5, 5),
               "".join(chr(rng.randrange(0x10FFFF)) for _ in range(rng.randrange(6))), math.inf]
    if kind < 7:
        return scalars[kind]
    items = [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return [items, tuple(items), {str(i): v for i, v in enumerate(items)}, Opaque("x"),
            {i: v for i, v in enumerate(items)}][kind - 7]


def test_fuzz_the_comparisons_with_random_values_and_text():
    rng = random.Random(11)
    for _ in range(3000):
        got, want = random_value(rng), random_value(rng)
        assert isinstance(returns_match(got, want), bool) and isinstance(paper_returns_match(got, want), bool)
        text = bytes(rng.randrange(256) for _ in range(rng.randrange(200))).decode("utf-8", "surrogateescape")
        expected = " ".join(rng.choice(["1", "-2", "0.5", "x", "1e3", "\n", "inf"]) for _ in range(5))
        assert isinstance(outputs_match(text, expected), bool)
        assert isinstance(paper_outputs_match(text, expected), bool)
