"""The IF verifier on every row of the released IF pool: labels in the release's exact format, an empty answer
fails every row, and an answer built from the row's constraints passes it.

The answers are built here from the constraint definitions of reference-behavior 5.4 (words, sentences,
paragraphs, ... as the paper's checkers count them), not with the verifier's own helpers. Some released rows
ask for things no answer can do at once (e.g. ``all_caps`` with ``starts_with: "In short:"``); ``conflict``
names why, from the definitions alone, and those rows are counted instead.
"""

from __future__ import annotations

import json
import lzma
import re
from collections import Counter
from pathlib import Path

import pytest

from dnmopd.verifiers.ifeval import CONSTRAINT_TYPES, parse_constraints, score, verify

ROOT = Path(__file__).resolve().parents[2]
RELEASE_COPY = ROOT / "tests" / "fixtures" / "data" / "release" / "teacher" / "if_train.jsonl.xz"
ROWS = [json.loads(line) for line in lzma.decompress(RELEASE_COPY.read_bytes()).decode().splitlines()]

WORD = re.compile(r"[A-Za-z0-9']+")
SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
FILLER = ("moon", "sun", "wind", "hill", "rock", "fog", "bird", "tiny", "cold", "dry", "soft", "mild")
"""Filler words: none holds a released forbidden letter (a, e, z) or keyword."""

LAYOUT = {"starts_with", "ends_with", "repeat_first", "wrapped_in", "bullet_count", "numbered_count",
          "paragraph_count", "sentence_count", "highlight_count"}


def num_words(text: str) -> int:
    return len(WORD.findall(text))


def num_sentences(text: str) -> int:
    return len([s for s in SENTENCE_BREAK.split(text.strip()) if s.strip()])


def fixed_texts(c: dict) -> tuple[list[tuple[str, bool]], list[tuple[str, bool]]]:
    """Texts the answer must start / end with, each with whether the match is case-sensitive."""
    starts = [(c[t]["value"], t == "starts_with") for t in ("starts_with", "repeat_first") if t in c]
    ends = [(c["ends_with"]["value"], True)] if "ends_with" in c else []
    if "wrapped_in" in c:
        starts.append((c["wrapped_in"]["open"], True))
        ends.append((c["wrapped_in"]["close"], True))
    return starts, ends


def conflict(c: dict) -> str | None:
    """Why no answer can satisfy every constraint of ``c`` (type -> spec), or None."""
    starts, ends = fixed_texts(c)
    for texts, kind, fits in ((starts, "beginnings", str.startswith), (ends, "endings", str.endswith)):
        for i, (a, a_exact) in enumerate(texts):
            for b, b_exact in texts[i + 1:]:
                x, y = (a, b) if a_exact and b_exact else (a.lower(), b.lower())
                if not (fits(x, y) or fits(y, x)):
                    return f"two {kind} that exclude each other"
    exact = [text for text, case_sensitive in starts + ends if case_sensitive]
    if "all_caps" in c and any(ch.islower() for text in exact for ch in text):
        return "all_caps with a fixed text in lower case"
    if "all_lowercase" in c and any(ch.isupper() for text in exact for ch in text):
        return "all_lowercase with a fixed text in upper case"
    if "word_count_min" in c and "word_count_max" in c and c["word_count_min"]["n"] > c["word_count_max"]["n"]:
        return "word_count_min above word_count_max"
    required = [text for text, _ in starts + ends] + c.get("must_include", {}).get("values", [])
    for banned in c.get("must_exclude", {}).get("values", []) + c.get("forbidden_chars", {}).get("values", []):
        if any(banned.lower() in text.lower() for text in required):
            return "an excluded word or letter inside a required text"
    if "no_commas" in c and any("," in text for text in required):
        return "no_commas with a comma in a required text"
    return None


FENCES = ("{}", "```json\n{}\n```", "```json {}```")
"""How a JSON answer is written: bare, in a fenced block, in a one-line fenced block."""


def build_answer(constraints: list[dict], *, fence: str = "{}") -> str:
    """An answer meeting every constraint (the row must have no ``conflict``); JSON answers are written as
    ``fence`` (one of ``FENCES``; the fence's letters would break ``all_caps``, so never with it)."""
    c = {spec["type"]: spec for spec in constraints}
    upper, lower = "all_caps" in c, "all_lowercase" in c

    def case(text: str) -> str:
        return text.upper() if upper else text.lower() if lower else text

    filler = iter(FILLER * 50)

    def word() -> str:
        return case(next(filler))

    words = [case(v) for v in c.get("must_include", {}).get("values", [])]
    words += [case("[city]")] * c.get("placeholder_count", {}).get("n", 0) + [word()]
    if "valid_json" in c:
        assert not LAYOUT & set(c), f"valid_json with {sorted(LAYOUT & set(c))}: not built by this test"
        while num_words(" ".join(words)) < c.get("word_count_min", {}).get("n", 0):
            words.append(word())
        text = json.dumps(" ".join(words))  # a JSON string holding the words
        return text if upper else fence.format(text)
    lines = [case(c["repeat_first"]["value"])] if "repeat_first" in c else []
    lines += [c["starts_with"]["value"]] if "starts_with" in c else []
    lines += [f"- {word()}" for _ in range(c.get("bullet_count", {}).get("n", 0))]
    lines += [f"{i}) {word()}" for i in range(1, c.get("numbered_count", {}).get("n", 0) + 1)]  # ')': no sentence
    lines += [" ".join(f"**{word()}**" for _ in range(c["highlight_count"]["n"]))] if "highlight_count" in c else []
    lines.append(" ".join(words))
    paragraphs = [word() for _ in range(c.get("paragraph_count", {}).get("n", 1) - 1)]
    ending = [c["ends_with"]["value"]] if "ends_with" in c else []
    sentence = case("sun.")

    def assemble(padding: list[str], sentences: int) -> str:
        body = lines + ([" ".join(padding)] if padding else [])
        body += [" ".join([sentence] * sentences)] if sentences else []
        text = "\n\n".join(["\n".join(body), *paragraphs])
        text = "\n".join([text, *ending])
        if "wrapped_in" in c:
            text = f"{c['wrapped_in']['open']}\n{text}\n{c['wrapped_in']['close']}"
        return text

    sentences = 0
    if "sentence_count" in c:
        while num_sentences(assemble([], sentences)) < c["sentence_count"]["n"]:
            sentences += 1
        assert num_sentences(assemble([], sentences)) == c["sentence_count"]["n"]
    padding = []
    while num_words(assemble(padding, sentences)) < c.get("word_count_min", {}).get("n", 0):
        padding.append(word())
    text = assemble(padding, sentences)
    assert num_words(text) <= c.get("word_count_max", {}).get("n", num_words(text))
    return text


def test_every_released_label_has_the_documented_parameters():
    kinds = Counter()
    for row in ROWS:
        for spec in parse_constraints(row["label"]):
            kinds[spec["type"]] += 1
            params = {k: v for k, v in spec.items() if k != "type"}
            assert tuple(sorted(params)) == tuple(sorted(CONSTRAINT_TYPES[spec["type"]].params)), spec
            for name, value in params.items():
                if name == "n":
                    assert type(value) is int and value >= 1
                elif name == "values":
                    assert isinstance(value, list) and value and all(type(v) is str for v in value)
                else:
                    assert type(value) is str and value
    assert set(kinds) == set(CONSTRAINT_TYPES) and len(kinds) == 19
    assert kinds["forbidden_chars"] == 790


def test_an_empty_answer_fails_every_released_row():
    assert not any(verify("", row["label"]) for row in ROWS)
    assert not any(verify("<|im_end|>", row["label"]) for row in ROWS)


def test_an_answer_built_for_a_released_row_passes_it():
    unsatisfiable = Counter()
    for i, row in enumerate(ROWS):
        constraints = json.loads(row["label"])
        reason = conflict({spec["type"]: spec for spec in constraints})
        if reason:
            unsatisfiable[reason] += 1
            continue
        answer = build_answer(constraints, fence=FENCES[i % len(FENCES)])
        assert score(answer, row["label"]).passed, (i, constraints, answer, score(answer, row["label"]))
        assert verify(answer + "<|im_end|>", row["label"]), i
    assert sum(unsatisfiable.values()) == 426  # 5.3% of the released rows have a reward of 0 for every answer
    assert set(unsatisfiable) >= {"two beginnings that exclude each other", "all_caps with a fixed text in lower case",
                                  "word_count_min above word_count_max"}


@pytest.mark.parametrize("letters, answer, passed", [
    (["e"], "A big cat sat on a mat.", True),
    (["e"], "An ELK.", False),
    (["a", "z"], "Big dogs run.", True),
    (["a", "z"], "Jazz", False),
])
def test_forbidden_letters_in_the_release_format(letters, answer, passed):
    assert verify(answer, [{"type": "forbidden_chars", "values": letters}]) is passed
