"""Instruction-following verifier: the 19 rule-based constraint checkers and their strict conjunction.

A label is a JSON list of constraint specs, each a dict with a ``type`` and that type's parameters:

    [{"type": "word_count_min", "n": 40}, {"type": "must_include", "values": ["lantern"]}]

Parameters per type (``n`` is a positive int; strings are non-empty):

    word_count_min, word_count_max, sentence_count, bullet_count, numbered_count, paragraph_count,
    highlight_count, placeholder_count                              -> n
    must_include, must_exclude                                      -> values (list of strings)
    forbidden_chars                                                 -> values (list of single letters)
    starts_with, ends_with, repeat_first                            -> value
    wrapped_in                                                      -> open, close
    all_caps, all_lowercase, no_commas, valid_json                  -> (none)

This is the released format (``teacher/if_train.jsonl``); e.g. ``{"type": "forbidden_chars", "values": ["e"]}``
holds when none of the letters occurs, in either case.

A malformed label is an error (``ConstraintError``; an unknown type raises ``UnknownConstraintError``),
never a pass. A checker that meets output it cannot handle returns False for that constraint.

End-of-turn handling (reference-behavior 2.7): the rollout engine keeps special tokens, so a finished
response usually ends with the literal ``<|im_end|>``. The reference passed that text to the checkers
unchanged, which breaks ``ends_with``, ``wrapped_in``, ``valid_json``, ``all_caps`` and word counts. We strip
trailing end-of-turn markers (any run of ``<|im_end|>`` / ``<|endoftext|>``, with whitespace between them)
before checking; nothing else in the response is touched. This is a deliberate divergence from the paper.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

END_OF_TURN_MARKERS = ("<|im_end|>", "<|endoftext|>")

_WORD = re.compile(r"[A-Za-z0-9']+")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_BULLET = re.compile(r"^\s*[-*\u2022]\s+\S")
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+\S")
_HIGHLIGHT = re.compile(r"\*\*(.+?)\*\*", re.DOTALL)
_PLACEHOLDER = re.compile(r"\[[^\[\]\n]{1,60}\]")
_OPENING_FENCE = re.compile(r"^```[a-zA-Z]*\s*")
_CLOSING_FENCE = re.compile(r"\s*```$")


class ConstraintError(ValueError):
    """A constraint label that cannot be checked (bad JSON, missing or wrong parameters)."""


class UnknownConstraintError(KeyError):
    """A constraint type outside the 19 known ones."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown constraint type"


def strip_end_of_turn(response: str) -> str:
    """Remove trailing end-of-turn markers (and the whitespace around them) from a response."""
    text = response
    while True:
        stripped = text.rstrip()
        marker = next((m for m in END_OF_TURN_MARKERS if stripped.endswith(m)), None)
        if marker is None:
            return text
        text = stripped[: -len(marker)]


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_BREAK.split(text.strip()) if s.strip()]


def paragraphs(text: str) -> list[str]:
    return [p for p in _PARAGRAPH_BREAK.split(text.strip()) if p.strip()]


def _count_lines(pattern: re.Pattern[str], text: str) -> int:
    return sum(1 for line in text.splitlines() if pattern.match(line))


def _letters(text: str) -> list[str]:
    return [c for c in text if c.isalpha()]


def _is_json(text: str) -> bool:
    """The paper's rule: an opening ```` ```lang ```` fence and a closing ```` ``` ```` are removed independently
    (so a one-line ```` ```json {"a": 1}``` ```` parses), then the rest must be one JSON value."""
    body = _CLOSING_FENCE.sub("", _OPENING_FENCE.sub("", text.strip()))
    try:
        json.loads(body)
    except (ValueError, RecursionError):
        return False
    return True


def _wrapped(text: str, open: str, close: str) -> bool:
    body = text.strip()
    return len(body) >= len(open) + len(close) and body.startswith(open) and body.endswith(close)


@dataclass(frozen=True, slots=True)
class ConstraintType:
    """One constraint type: its parameter names and its check ``(response, **params) -> bool``."""

    params: tuple[str, ...]
    check: Callable[..., bool]
    vacuous_on_empty: bool = False
    """True when an empty response satisfies it (the generator never uses only such constraints)."""


CONSTRAINT_TYPES: dict[str, ConstraintType] = {
    "word_count_min": ConstraintType(("n",), lambda r, n: len(words(r)) >= n),
    "word_count_max": ConstraintType(("n",), lambda r, n: len(words(r)) <= n, vacuous_on_empty=True),
    "sentence_count": ConstraintType(("n",), lambda r, n: len(sentences(r)) == n),
    "bullet_count": ConstraintType(("n",), lambda r, n: _count_lines(_BULLET, r) == n),
    "numbered_count": ConstraintType(("n",), lambda r, n: _count_lines(_NUMBERED, r) == n),
    "paragraph_count": ConstraintType(("n",), lambda r, n: len(paragraphs(r)) == n),
    "highlight_count": ConstraintType(("n",), lambda r, n: len(_HIGHLIGHT.findall(r)) >= n),
    "placeholder_count": ConstraintType(("n",), lambda r, n: len(_PLACEHOLDER.findall(r)) >= n),
    "must_include": ConstraintType(("values",), lambda r, values: all(v.lower() in r.lower() for v in values)),
    "must_exclude": ConstraintType(
        ("values",), lambda r, values: not any(v.lower() in r.lower() for v in values), vacuous_on_empty=True
    ),
    "forbidden_chars": ConstraintType(
        ("values",), lambda r, values: not any(v.lower() in r.lower() for v in values), vacuous_on_empty=True
    ),
    "all_caps": ConstraintType((), lambda r: bool(_letters(r)) and all(c.isupper() for c in _letters(r))),
    "all_lowercase": ConstraintType((), lambda r: bool(_letters(r)) and all(c.islower() for c in _letters(r))),
    "starts_with": ConstraintType(("value",), lambda r, value: r.strip().startswith(value)),
    "ends_with": ConstraintType(("value",), lambda r, value: r.strip().endswith(value)),
    "no_commas": ConstraintType((), lambda r: "," not in r, vacuous_on_empty=True),
    "valid_json": ConstraintType((), _is_json),
    "wrapped_in": ConstraintType(("open", "close"), _wrapped),
    "repeat_first": ConstraintType(("value",), lambda r, value: r.strip().lower().startswith(value.strip().lower())),
}


def _validate_param(name: str, value: object, where: str) -> None:
    if name == "n":
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConstraintError(f"{where}: parameter 'n' must be a positive integer, got {value!r}")
    elif name == "values":
        if (not isinstance(value, list) or not value
                or not all(isinstance(v, str) and v.strip() for v in value)):
            raise ConstraintError(f"{where}: parameter 'values' must be a non-empty list of non-empty strings, "
                                  f"got {value!r}")
    elif not isinstance(value, str) or not value.strip():
        raise ConstraintError(f"{where}: parameter {name!r} must be a non-empty string, got {value!r}")


def validate_constraint(spec: object, where: str = "constraint") -> dict:
    """Check one constraint spec; returns it. Raises ConstraintError / UnknownConstraintError."""
    if not isinstance(spec, Mapping):
        raise ConstraintError(f"{where}: must be an object with a 'type', got {type(spec).__name__}")
    kind = spec.get("type")
    if not isinstance(kind, str):
        raise ConstraintError(f"{where}: missing string field 'type'")
    if kind not in CONSTRAINT_TYPES:
        raise UnknownConstraintError(f"{where}: unknown constraint type {kind!r} "
                                     f"(known: {', '.join(sorted(CONSTRAINT_TYPES))})")
    expected = set(CONSTRAINT_TYPES[kind].params)
    given = set(spec) - {"type"}
    if given != expected:
        raise ConstraintError(f"{where}: type {kind!r} takes parameters {sorted(expected)}, got {sorted(given)}")
    for name in CONSTRAINT_TYPES[kind].params:
        _validate_param(name, spec[name], f"{where} ({kind})")
    if kind == "forbidden_chars" and not all(len(v) == 1 and v.isalpha() for v in spec["values"]):
        raise ConstraintError(f"{where} (forbidden_chars): 'values' must be single letters, got {spec['values']!r}")
    return dict(spec)


def parse_constraints(label: str | Sequence[Mapping]) -> list[dict]:
    """Parse and validate an IF label (JSON string or already-decoded list)."""
    if isinstance(label, str):
        try:
            label = json.loads(label)
        except ValueError as exc:
            raise ConstraintError(f"IF label is not valid JSON: {exc}") from None
    if not isinstance(label, list):
        raise ConstraintError(f"IF label must be a JSON list of constraints, got {type(label).__name__}")
    if not label:
        raise ConstraintError("IF label is an empty constraint list")
    return [validate_constraint(spec, f"constraint {i}") for i, spec in enumerate(label)]


def check_constraint(response: str, spec: Mapping) -> bool:
    """One (validated) constraint on a response; any checker exception on odd output counts as False."""
    kind = CONSTRAINT_TYPES[spec["type"]]
    try:
        return bool(kind.check(response, **{p: spec[p] for p in kind.params}))
    except Exception:
        return False


@dataclass(frozen=True, slots=True)
class IfScore:
    passed: bool
    """Strict conjunction: every constraint holds."""
    per_constraint: dict[str, bool]
    """``"<index>:<type>" -> satisfied``."""

    @property
    def satisfied(self) -> int:
        return sum(self.per_constraint.values())

    @property
    def total(self) -> int:
        return len(self.per_constraint)


def score(response: str, label: str | Sequence[Mapping]) -> IfScore:
    """Check a response (as given, no end-of-turn stripping) against every constraint of a label."""
    constraints = parse_constraints(label)
    results = {f"{i}:{spec['type']}": check_constraint(response, spec) for i, spec in enumerate(constraints)}
    return IfScore(passed=all(results.values()), per_constraint=results)


def verify(response: str, label: str | Sequence[Mapping]) -> bool:
    """IF verdict: trailing end-of-turn markers stripped, then strict conjunction of all constraints."""
    return score(strip_end_of_turn(response), label).passed
