"""The code verifier's two rule sets for comparing a program's result with the expected one.

``per_test`` (``outputs_match``, ``returns_match``), exact where the expected value is exact:

- stdout: (a) equal after stripping the whole text; (b) equal line by line after stripping every line and
  dropping empty lines; (c) equal token by token (whitespace-separated, in order), where an expected
  decimal token (``1.5``, ``2e-3``) accepts any number token without leading zeros (``0.5``, ``7``, not
  ``007``) within ``1e-8 + 1e-5 * |expected|`` (numpy's ``allclose`` tolerance; never for nan or inf), and
  any other token, integers included, only the same text: ``00000101``, ``+101`` and ``101.0`` are not
  ``101``.
- return values: equal to the expected JSON value, or to the only element of a one-element expected list
  (the APPS/TACO wrapper). Booleans equal only booleans, integers only integers (exactly), strings only
  strings; an expected float accepts an int or float within the tolerance above; lists accept lists or
  tuples of equal elements; dicts need the same keys (integer keys count as their JSON strings) and equal
  values. Anything else (sets, objects) is wrong.

``paper`` (``paper_outputs_match``, ``paper_returns_match``): the reference judge's rules (PRIME
``testing_util``) as its code runs them: stdout lines (``str.splitlines``) joined or stripped against the
stripped expected text, the expected lines (split on ``\\n``, empty ones dropped, stripped) against the
output lines as they are or without empty ones, and, unless every line pair is digits only
(``str.isdigit``), every line as a ``float`` within numpy's ``allclose``; return values by Python's ``==``
(so ``True == 1`` and ``1 == 1.0``), also against the first element of any non-empty expected list, with
its dict-key and tuple conversions. Its final set comparison is left out: in its code it never passes.

Every function takes model output as hostile: any size or nesting gives True or False, never an exception.
"""

from __future__ import annotations

import math
import re

_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
"""A number token without leading zeros."""
_RTOL, _ATOL = 1e-5, 1e-8  # numpy.allclose


def _within_tolerance(got: float, want: float) -> bool:
    return math.isfinite(got) and math.isfinite(want) and abs(got - want) <= _ATOL + _RTOL * abs(want)


def _tokens_match(got: str, want: str) -> bool:
    if got == want:
        return True
    if _INTEGER.match(want) or not _DECIMAL.match(want):
        return False
    return bool(_PLAIN_NUMBER.match(got)) and _within_tolerance(float(got), float(want))


def outputs_match(got: str, want: str) -> bool:
    """``per_test`` stdout comparison (see the module docstring)."""
    if got.strip() == want.strip():
        return True
    lines = [line.strip() for line in got.splitlines() if line.strip()]
    if lines == [line.strip() for line in want.splitlines() if line.strip()]:
        return True
    got_tokens, want_tokens = got.split(), want.split()
    return len(got_tokens) == len(want_tokens) and all(map(_tokens_match, got_tokens, want_tokens))


def returns_match(got, want) -> bool:
    """``per_test`` comparison of a decoded return value with the expected JSON value."""
    try:
        return _equal(got, want) or (type(want) is list and len(want) == 1 and _equal(got, want[0]))
    except RecursionError:
        return False


def _json_key(key) -> str | None:
    if type(key) is str:
        return key
    if type(key) is bool:
        return "true" if key else "false"
    if type(key) is int and key.bit_length() < 10000:
        return str(key)
    return None


def _equal(got, want) -> bool:
    if want is None or type(want) is bool:
        return type(got) is type(want) and got == want
    if type(want) is int:
        return type(got) is int and got == want
    if type(want) is float:
        if type(got) not in (int, float):
            return False
        try:
            return _within_tolerance(float(got), want) or float(got) == want
        except OverflowError:
            return False
    if type(want) is str:
        return type(got) is str and got == want
    if type(want) is list:
        return type(got) in (list, tuple) and len(got) == len(want) and all(map(_equal, got, want))
    if type(want) is dict:
        if type(got) is not dict or len(got) != len(want):
            return False
        keyed = {_json_key(key): value for key, value in got.items()}
        return keyed.keys() == want.keys() and all(_equal(keyed[key], value) for key, value in want.items())
    return False


def paper_outputs_match(got: str, want: str) -> bool:
    """The reference judge's stdout comparison of the captured output with the expected text."""
    lines = got.splitlines()
    stripped = want.strip()
    if "\n".join(lines).strip() == stripped or "\n".join(line.strip() for line in lines).strip() == stripped:
        return True
    want_lines = [line.strip() for line in want.split("\n") if line]
    nonempty = [line for line in lines if line]
    if lines in ([want], want_lines) or nonempty == want_lines:
        return True
    if len(nonempty) != len(want_lines):
        return False
    pairs = list(zip(nonempty, want_lines, strict=True))
    if all(a.isdigit() and b.isdigit() for a, b in pairs):
        return False
    try:
        pairs = [(float(a), float(b)) for a, b in pairs]
    except ValueError:
        return False
    return all(a == b if math.isinf(a) or math.isinf(b) else _within_tolerance(a, b) for a, b in pairs)


def paper_returns_match(got, want) -> bool:
    """The reference judge's comparison of a return value with the expected (JSON-decoded) value."""
    try:
        want = _paper_expected(want)
        if isinstance(got, tuple):
            got = list(got)
        matched = got == want or (isinstance(want, list) and len(want) > 0 and got == want[0])
        if not matched and isinstance(got, list) and got and isinstance(got[0], tuple):
            try:
                matched = [list(item) for item in got] == want[0]
            except (TypeError, IndexError, KeyError):
                pass
        return matched is True
    except (RecursionError, TypeError, ValueError):  # the reference counts its own exceptions as a failure
        return False


def _paper_expected(want):
    """The reference's conversions: a dict becomes a one-element list of it with integer keys, and so does
    a list whose first element is a dict (where the keys convert)."""
    try:
        if isinstance(want, dict):
            want = [{int(key): value for key, value in want.items()}]
    except ValueError:
        pass
    try:
        if isinstance(want[0], dict):
            want = [{int(key): value for key, value in want[0].items()}]
    except (ValueError, TypeError, IndexError, KeyError):
        pass
    return want
