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
before checking, under both rule sets. This is a deliberate divergence from the paper.

Two rule sets (``IfVerifier.Config.rules``; docs/verifiers.md): ``strict`` (the default) reads the response as
it is displayed: invisible format characters (Unicode category Cf: zero-width spaces and joiners, soft hyphens,
direction marks) are removed before every check, and ``must_exclude`` / ``forbidden_chars`` also see every
letter as the ASCII letter it looks like (compatibility forms, accents dropped, Unicode's confusables: a
Cyrillic ``а`` is an ``a``, ``é`` an ``e``). ``paper`` checks the text as it is, as the paper's checkers did.

``IfVerifier`` runs the checks in killable worker processes (``verifiers.workers``) under a per-check deadline.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dnmopd.verifiers.workers import GraderPool

RULES = ("strict", "paper")
END_OF_TURN_MARKERS = ("<|im_end|>", "<|endoftext|>")

_WORD = re.compile(r"[A-Za-z0-9']+")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_BULLET = re.compile(r"^\s*[-*\u2022]\s+\S")
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+\S")
_HIGHLIGHT = re.compile(r"\*\*(.+?)\*\*", re.DOTALL)
_PLACEHOLDER = re.compile(r"\[[^\[\]\n]{1,60}\]")
_OPENING_FENCE = re.compile(r"^```[a-zA-Z]*\s*")


class ConstraintError(ValueError):
    """A constraint label that cannot be checked (bad JSON, missing or wrong parameters)."""


class UnknownConstraintError(KeyError):
    """A constraint type outside the 19 known ones."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown constraint type"


def strip_end_of_turn(response: str) -> str:
    """Remove trailing end-of-turn markers (and the whitespace between and after them) from a response."""
    end = kept = len(response)
    while True:
        while end and response[end - 1].isspace():
            end -= 1
        marker = next((m for m in END_OF_TURN_MARKERS if response.endswith(m, 0, end)), None)
        if marker is None:
            return response[:kept]
        end = kept = end - len(marker)


@functools.cache
def _reading_tables() -> tuple[dict, dict]:
    """``str.translate`` tables of the strict rules: (invisible characters removed, and also accents removed
    with every look-alike of an ASCII letter made that letter). Built once per process."""
    from confusable_homoglyphs.confusables import confusables_data

    invisible, marks = {}, {}
    for code in range(0x110000):
        category = unicodedata.category(chr(code))
        if category == "Cf":
            invisible[code] = None
        elif category in ("Mn", "Me"):
            marks[code] = None
    look_alikes = {ord(char): next(alike["c"] for alike in alikes if len(alike["c"]) == 1 and alike["c"].isascii()
                                   and alike["c"].isalpha())
                   for char, alikes in confusables_data.items()
                   if len(char) == 1 and not char.isascii()
                   and any(len(a["c"]) == 1 and a["c"].isascii() and a["c"].isalpha() for a in alikes)}
    return invisible, {**look_alikes, **marks, **invisible}


def visible_text(text: str) -> str:
    """The text without invisible format characters (Unicode category Cf)."""
    return text.translate(_reading_tables()[0])


def look_alike_letters(text: str) -> str:
    """The text as ASCII letters where it looks like them: compatibility forms decomposed (NFKD), accents and
    invisible characters dropped, Unicode's confusables of an ASCII letter replaced by it."""
    return unicodedata.normalize("NFKD", text).translate(_reading_tables()[1])


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
    body = _OPENING_FENCE.sub("", text.strip())
    if body.endswith("```"):  # a regex ``\s*```$`` would be quadratic in a run of whitespace
        body = body[:-3].rstrip()
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
    reads_look_alikes: bool = False
    """Under the strict rules the check sees ``look_alike_letters`` of the response."""


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
        ("values",), lambda r, values: not any(v.lower() in r.lower() for v in values), vacuous_on_empty=True,
        reads_look_alikes=True,
    ),
    "forbidden_chars": ConstraintType(
        ("values",), lambda r, values: not any(v.lower() in r.lower() for v in values), vacuous_on_empty=True,
        reads_look_alikes=True,
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


def check_constraint(response: str, spec: Mapping, rules: str = "strict") -> bool:
    """One (validated) constraint on a response; any checker exception on odd output counts as False."""
    kind = CONSTRAINT_TYPES[spec["type"]]
    try:
        if rules == "strict":
            response = look_alike_letters(response) if kind.reads_look_alikes else visible_text(response)
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


def score(response: str, label: str | Sequence[Mapping], rules: str = "strict") -> IfScore:
    """Check a response (as given, no end-of-turn stripping) against every constraint of a label."""
    constraints = parse_constraints(label)
    results = {f"{i}:{spec['type']}": check_constraint(response, spec, rules) for i, spec in enumerate(constraints)}
    return IfScore(passed=all(results.values()), per_constraint=results)


def verify(response: str, label: str | Sequence[Mapping], rules: str = "strict") -> bool:
    """IF verdict: trailing end-of-turn markers stripped, then strict conjunction of all constraints."""
    return score(strip_end_of_turn(response), label, rules).passed


class IfVerifier:
    """``verify`` in killable worker processes: each check answers within ``timeout_s`` or gives None."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        rules: str = "strict"
        """strict (the checks read the text as displayed: invisible characters removed, look-alike letters
        count for must_exclude and forbidden_chars) or paper (the text as it is, as the paper's checkers
        read it); docs/verifiers.md lists the differences."""
        workers: int = 2
        """Checker processes (responses checked in parallel)."""
        timeout_s: float = 5.0
        """Wall-clock bound per response (all its constraints); past it the worker is killed and the verdict is
        None."""
        startup_timeout_s: float = 60.0
        """Bound on a worker's start-up."""
        memory_limit_mb: int = 4096
        """Address-space limit of each worker (0: none); a response that exceeds it gets verdict None."""

        def __post_init__(self) -> None:
            if self.rules not in RULES:
                raise ValueError(f"IfVerifier.Config.rules must be one of {', '.join(RULES)}, got {self.rules!r}")
            if self.workers < 1:
                raise ValueError(f"IfVerifier.Config.workers must be >= 1, got {self.workers}")
            if self.memory_limit_mb < 0:
                raise ValueError(f"IfVerifier.Config.memory_limit_mb must be >= 0, got {self.memory_limit_mb}")
            for name in ("timeout_s", "startup_timeout_s"):
                if not getattr(self, name) > 0:
                    raise ValueError(f"IfVerifier.Config.{name} must be > 0, got {getattr(self, name)}")

        def build(self) -> IfVerifier:
            return IfVerifier(self)

    def __init__(self, config: IfVerifier.Config | None = None) -> None:
        self.config = config or IfVerifier.Config()
        self._pool = GraderPool(functools.partial(verify, rules=self.config.rules), name="ifeval",
                                workers=self.config.workers, timeout_s=self.config.timeout_s,
                                startup_timeout_s=self.config.startup_timeout_s,
                                memory_limit_mb=self.config.memory_limit_mb,
                                warmup=("x", '[{"type": "forbidden_chars", "values": ["e"]}]'))

    @property
    def failures(self):
        """Counts of ``timeout`` / ``crash`` / ``error`` events, for metrics."""
        return self._pool.failures

    def verify(self, response: str, label: str | Sequence[Mapping]) -> bool | None:
        """True / False, or None when the check timed out or its worker failed. A malformed label raises here."""
        parse_constraints(label)
        verdict = self._pool.grade(response, label)
        return None if verdict is None else bool(verdict)

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> IfVerifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
