"""The paper's math grader (reference-behavior 6.2): Hendrycks MATH normalisation, then sympy equality.

``grade(answer, gold)`` compares the content of the response's last ``\\boxed{}`` with the label (both already
extracted by ``verifiers.math``). Correct when either

* the two strings are equal after the Hendrycks MATH normalisation (``hendrycks_normalize``: ``\\dfrac`` ->
  ``\\frac``, ``\\frac12`` -> ``\\frac{1}{2}``, ``0.5`` -> ``\\frac{1}{2}``, ``3/4`` -> ``\\frac{3}{4}``, units
  after ``\\text{ ``, ``\\%``, ``\\$``, degrees, ``\\left``/``\\right``, a short ``x =`` prefix, spaces); or
* after a second normalisation (``sympy_normalize``: LaTeX to text with pylatexenc, unit words, percent and
  dollar signs, ``million``/``billion``, mixed numbers ``7 3/4``, braces, lower case, numbers that are integers
  written as integers, so ``1e3`` is ``1000``) the strings are equal, or, element by element for tuples and
  intervals (same brackets, same length), every pair is equal as follows: two fractions ``a/b`` must be
  identical strings (an unreduced fraction is wrong); an integer never equals a non-integer (``5!`` is not
  ``120``, ``2^{10}`` is not ``1024``); otherwise sympy must simplify ``gold - answer`` to 0, and it is only
  asked when the expression has at most two distinct letters and no exponent that could explode
  (``^{``, ``^(``, ``^12``, ``^2^``).

Lists without brackets are one element (``1, 2, 3`` is not ``3, 2, 1``). Written from the behaviour of the
paper's grader (the slime/verl lineage of the Hendrycks and PRM800K graders), not copied from it.
"""

from __future__ import annotations

import re

_TEXT_WRAPPER = re.compile(r"^\\text\{(?P<text>.+?)\}$")
_UNITS = ("degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week", "month",
          "year", "foot", "feet", "inch", "yard")
_UNIT_WORDS = [re.compile(unit + r"(es)?(s)? *(\^[0-9]+)?") for unit in _UNITS]
_DEGREES = re.compile(r"\^ *\\circ")
_THIN_SPACE_COMMA = re.compile(r",\\! *")
_MINUS_SPACE = re.compile(r"- *")
_MIXED_NUMBER = re.compile(r"([0-9]) +([0-9])")
_THOUSANDS_COMMA = re.compile(r"(\d)(,)(\d\d\d)($|\D)")
_FRACTION = re.compile(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$")
_EXPLOSIVE_POWER = (re.compile(r"\^[0-9]+\^"), re.compile(r"\^[0-9][0-9]+"))
_BRACKETS = "()[]"
_UNICODE_MATH = {"√": "sqrt", "π": "pi", "∞": "inf", "∪": "U", "·": "*", "×": "*"}


class _Unnormalizable(Exception):
    """The Hendrycks normalisation gives up on this answer (it is then compared as it stands)."""


def hendrycks_normalize(answer: str) -> str:
    text = answer.strip()
    wrapped = _TEXT_WRAPPER.search(text)
    if wrapped:
        text = wrapped.group("text").strip()
    try:
        return _hendrycks_steps(text)
    except _Unnormalizable:
        return text


def _hendrycks_steps(text: str) -> str:
    for old, new in (("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac"),
                     ("\\left", ""), ("\\right", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("\\$", "")):
        text = text.replace(old, new)
    if "\\text{ " in text:  # units written after the number
        parts = text.split("\\text{ ")
        if len(parts) != 2:
            raise _Unnormalizable
        text = parts[0]
    text = text.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not text:
        return text
    if text[0] == ".":
        text = "0" + text
    sides = text.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # "x = 5", "k=3"
        text = sides[1]
    text = _brace_sqrt_arguments(text).replace(" ", "")
    text = _brace_frac_arguments(text)
    if text == "0.5":
        return "\\frac{1}{2}"
    return _slash_to_frac(text)


def _brace_sqrt_arguments(text: str) -> str:
    """``\\sqrt3`` -> ``\\sqrt{3}``."""
    head, *rest = text.split("\\sqrt")
    for piece in rest:
        if not piece:
            raise _Unnormalizable
        head += "\\sqrt" + (piece if piece[0] == "{" else "{" + piece[0] + "}" + piece[1:])
    return head


def _brace_frac_arguments(text: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{72}`` -> ``\\frac{1}{72}``; unchanged if an argument is missing."""
    head, *rest = text.split("\\frac")
    for piece in rest:
        if not piece:
            raise _Unnormalizable
        if piece[0] == "{":
            head += "\\frac" + piece
        elif len(piece) < 2:
            return text
        elif piece[1] == "{":
            head += "\\frac{" + piece[0] + "}" + piece[1:]
        else:
            head += "\\frac{" + piece[0] + "}{" + piece[1] + "}" + piece[2:]
    return head


def _slash_to_frac(text: str) -> str:
    """``3/4`` -> ``\\frac{3}{4}`` when both sides are plain integers."""
    sides = text.split("/")
    if len(sides) != 2:
        return text
    try:
        numerator, denominator = int(sides[0]), int(sides[1])
    except ValueError:
        return text
    return f"\\frac{{{numerator}}}{{{denominator}}}" if text == f"{numerator}/{denominator}" else text


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _is_integral(value: float) -> bool:
    try:
        return abs(value - int(round(value))) <= 1e-7
    except (OverflowError, ValueError):  # inf, nan
        return False


def _drop_thousands_commas(text: str) -> str:
    while (next_text := _THOUSANDS_COMMA.sub(r"\1\3\4", text)) != text:
        text = next_text
    return text


def _is_integer_text(text: str) -> bool:
    value = _float_or_none(_drop_thousands_commas(text))
    return value is not None and _is_integral(value)


def _latex_to_text(expr: str) -> str:
    from pylatexenc.latex2text import LatexNodes2Text

    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    text = LatexNodes2Text().latex_to_text(expr)
    for symbol, name in _UNICODE_MATH.items():
        text = text.replace(symbol, name)
    return text.strip()


def sympy_normalize(expr: str) -> str:
    wrapped = _TEXT_WRAPPER.search(expr)
    if wrapped:
        expr = wrapped.group("text")
    for old, new in (("\\%", "%"), ("\\$", "$"), ("$", ""), ("%", ""), (" or ", " , "), (" and ", " , "),
                     ("million", "*10^6"), ("billion", "*10^9"), ("trillion", "*10^12")):
        expr = expr.replace(old, new)
    for unit in _UNIT_WORDS:
        expr = unit.sub("", expr)
    expr = _DEGREES.sub("", expr)
    if expr and expr[0] == "{" and expr[-1] == "}":
        expr = expr[1:-1]
    expr = _THIN_SPACE_COMMA.sub("", expr)
    value = _float_or_none(expr)
    if value is not None and _is_integral(value):
        expr = str(int(round(value)))
    if "\\" in expr:
        try:
            expr = _latex_to_text(expr)
        except Exception:  # pylatexenc gives up on malformed LaTeX: keep the text as it is
            pass
    expr = _MIXED_NUMBER.sub(r"\1+\2", _MINUS_SPACE.sub("-", expr))
    expr = expr.replace(" ", "").replace("{", "").replace("}", "").lower()
    if _is_integer_text(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr


def _elements(expr: str) -> list[str]:
    """The elements of a tuple or interval ``(a, b)`` / ``[a, b)``, else the expression as one element."""
    expr = _drop_thousands_commas(expr)
    if not expr:
        return []
    inner = expr[1:-1]
    if len(expr) > 2 and expr[0] in _BRACKETS and expr[-1] in _BRACKETS and not any(c in inner for c in _BRACKETS):
        return [element.strip() for element in inner.split(",")]
    return [expr]


def _safe_for_sympy(expr: str) -> bool:
    letters = {c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    return (len(letters) <= 2 and "^{" not in expr and "^(" not in expr
            and not any(pattern.search(expr) for pattern in _EXPLOSIVE_POWER))


def _sympy_equal(gold: str, answer: str) -> bool:
    from sympy import simplify
    from sympy.parsing.sympy_parser import (
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    difference = f"({gold})-({answer})"
    if not _safe_for_sympy(difference):
        return False
    try:
        parsed = parse_expr(difference.replace("^", "**"),
                            transformations=standard_transformations + (implicit_multiplication_application,))
        return simplify(parsed) == 0
    except Exception:  # anything sympy cannot parse or simplify is not equal
        return False


def _elements_equal(gold: str, answer: str) -> bool:
    if _FRACTION.search(gold) and _FRACTION.search(answer):
        return gold == answer  # unreduced fractions are wrong
    if _is_integer_text(gold) != _is_integer_text(answer):
        return False
    return _sympy_equal(gold, answer)


def sympy_equal(answer: str, gold: str) -> bool:
    gold, answer = sympy_normalize(gold), sympy_normalize(answer)
    if gold == answer:
        return True
    if not answer:
        return False
    gold_elements, answer_elements = _elements(gold), _elements(answer)
    if len(gold_elements) > 1 and (gold[0] != answer[0] or gold[-1] != answer[-1]):
        return False
    if len(gold_elements) != len(answer_elements):
        return False
    return all(_elements_equal(g, a) for g, a in zip(gold_elements, answer_elements, strict=True))


def grade(answer: str, gold: str) -> bool:
    """The paper's verdict for an extracted answer against an extracted, non-empty gold answer."""
    return hendrycks_normalize(gold) == hendrycks_normalize(answer) or sympy_equal(answer, gold)
