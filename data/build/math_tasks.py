"""Synthetic math problems with exact reference answers (for the sample data only).

Every problem is drawn from a template with seeded parameters; the answer is computed exactly (integers,
``fractions.Fraction``, ``math.comb``) and written the way DeepMath-style labels are written (LaTeX forms
such as ``\\frac{7}{12}``, ``25\\pi``, ``3\\sqrt{2}``).
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

MATH_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."


def latex_number(value: Fraction | int) -> str:
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _arithmetic(rng: random.Random) -> tuple[str, str]:
    a, b, c = rng.randint(12, 99), rng.randint(3, 19), rng.randint(10, 500)
    return f"Compute ${a} \\times {b} - {c}$.", str(a * b - c)


def _fraction_sum(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(1, 9), rng.randint(2, 12)
    c, d = rng.randint(1, 9), rng.randint(2, 12)
    total = Fraction(a, b) + Fraction(c, d)
    return (f"Compute $\\frac{{{a}}}{{{b}}} + \\frac{{{c}}}{{{d}}}$ and write the result as a fraction in "
            f"lowest terms.", latex_number(total))


def _linear_equation(rng: random.Random) -> tuple[str, str]:
    a = rng.choice([2, 3, 4, 5, 6, 7, 8, 9])
    b, c = rng.randint(-20, 20), rng.randint(-30, 30)
    return f"Solve for $x$: ${a}x + {b} = {c}$.".replace("+ -", "- "), latex_number(Fraction(c - b, a))


def _lcm(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(4, 60), rng.randint(4, 60)
    return f"What is the least common multiple of {a} and {b}?", str(math.lcm(a, b))


def _circle_area(rng: random.Random) -> tuple[str, str]:
    r = rng.randint(2, 15)
    return (f"A circle has radius {r}. What is its area? Express your answer in terms of $\\pi$.",
            f"{r * r}\\pi")


def _choose(rng: random.Random) -> tuple[str, str]:
    n = rng.randint(6, 14)
    k = rng.randint(2, n - 2)
    return (f"In how many ways can a committee of {k} people be chosen from a group of {n} people?",
            str(math.comb(n, k)))


def _simplify_root(rng: random.Random) -> tuple[str, str]:
    outer, inner = rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7, 10, 11])
    return f"Simplify $\\sqrt{{{outer * outer * inner}}}$.", f"{outer}\\sqrt{{{inner}}}"


def _root_sum(rng: random.Random) -> tuple[str, str]:
    r1, r2 = rng.randint(-9, 9), rng.randint(-9, 9)
    s, p = r1 + r2, r1 * r2
    poly = f"x^2 {'-' if s >= 0 else '+'} {abs(s)}x {'+' if p >= 0 else '-'} {abs(p)} = 0"
    return f"What is the product of the roots of ${poly}$?", str(p)


def _series(rng: random.Random) -> tuple[str, str]:
    first, step, count = rng.randint(1, 20), rng.randint(2, 9), rng.randint(10, 40)
    total = count * (2 * first + (count - 1) * step) // 2
    return (f"What is the sum of the first {count} terms of the arithmetic sequence that starts "
            f"{first}, {first + step}, {first + 2 * step}, ...?", str(total))


def _dice(rng: random.Random) -> tuple[str, str]:
    target = rng.randint(3, 11)
    ways = sum(1 for i in range(1, 7) for j in range(1, 7) if i + j == target)
    return (f"Two fair six-sided dice are rolled. What is the probability that the sum of the numbers shown "
            f"is {target}?", latex_number(Fraction(ways, 36)))


def _percent(rng: random.Random) -> tuple[str, str]:
    p, q = rng.choice([5, 12, 15, 25, 35, 40, 75]), rng.randint(2, 40) * 10
    value = Fraction(p * q, 100)
    answer = str(value.numerator) if value.denominator == 1 else f"{float(value):g}"
    return f"What is {p}\\% of {q}?", answer


def _power_mod(rng: random.Random) -> tuple[str, str]:
    a, b, m = rng.randint(2, 13), rng.randint(20, 200), rng.choice([7, 9, 11, 13, 17])
    return f"What is the remainder when ${a}^{{{b}}}$ is divided by {m}?", str(pow(a, b, m))


TEMPLATES = (_arithmetic, _fraction_sum, _linear_equation, _lcm, _circle_area, _choose, _simplify_root,
             _root_sum, _series, _dice, _percent, _power_mod)


def math_problems(count: int, seed: int) -> list[tuple[str, str]]:
    """``count`` distinct (prompt, answer) pairs, templates taken in turn."""
    rng = random.Random(seed)
    problems, seen = [], set()
    while len(problems) < count:
        question, answer = TEMPLATES[len(problems) % len(TEMPLATES)](rng)
        if question not in seen:
            seen.add(question)
            problems.append((question + MATH_SUFFIX, answer))
    return problems
