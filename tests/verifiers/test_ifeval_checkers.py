"""The 19 IF constraint checkers, the strict conjunction, label errors and end-of-turn stripping."""

from __future__ import annotations

import json

import pytest

from dnmopd.verifiers.ifeval import (
    CONSTRAINT_TYPES,
    ConstraintError,
    UnknownConstraintError,
    parse_constraints,
    score,
    strip_end_of_turn,
    verify,
)

# type -> (spec parameters, a response that satisfies it, one that does not)
CASES = {
    "word_count_min": ({"n": 5}, "one two three four five", "one two three four"),
    "word_count_max": ({"n": 3}, "it's a cat", "it is a cat"),
    "sentence_count": ({"n": 2}, "I ran. You walked!", "I ran. You walked! Did he?"),
    "bullet_count": ({"n": 2}, "Intro\n- a\n  * b", "- a\n- b\n\u2022 c"),
    "numbered_count": ({"n": 2}, "1. a\n2) b", "1. a\n2.b"),
    "paragraph_count": ({"n": 2}, "a\n\n  \nb\n", "a\nb"),
    "highlight_count": ({"n": 2}, "**a** and **b\nc**", "**a** and *b*"),
    "placeholder_count": ({"n": 1}, "Dear [name],", "Dear [] and [x\ny]"),
    "must_include": ({"values": ["lantern", "Harbour"]}, "The LANTERN by the harbours", "The lantern"),
    "must_exclude": ({"values": ["orange"]}, "apples", "Oranges"),
    "forbidden_chars": ({"values": ["e"]}, "A big cat", "ELK"),
    "all_caps": ({}, "HELLO, 123!", "HELLo"),
    "all_lowercase": ({}, "hello 1", "Hello"),
    "starts_with": ({"value": "Answer:"}, "  Answer: yes", "answer: yes"),
    "ends_with": ({"value": "THE END"}, "and so... THE END \n", "THE END."),
    "no_commas": ({}, "a b", "a, b"),
    "valid_json": ({}, '```json\n{"a": [1, 2]}\n```', "{a: 1}"),
    "wrapped_in": ({"open": "<<", "close": ">>"}, " <<hi>> ", "<<hi>"),
    "repeat_first": ({"value": "Write a poem."}, "write a POEM. Roses...", "Here: Write a poem."),
}


def test_every_type_has_cases():
    assert set(CASES) == set(CONSTRAINT_TYPES) and len(CASES) == 19


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_type_passes_and_fails(kind):
    params, good, bad = CASES[kind]
    label = json.dumps([{"type": kind, **params}])
    assert score(good, label).passed
    assert not score(bad, label).passed


@pytest.mark.parametrize("kind", sorted(CASES))
def test_odd_output_is_false_not_an_exception(kind):
    params = CASES[kind][0]
    spec = [{"type": kind, **params}]
    vacuous = CONSTRAINT_TYPES[kind].vacuous_on_empty
    assert score("", spec).passed is vacuous
    assert score(None, spec).passed is False  # the checker raises on a non-string: counted as False


def test_more_edge_cases():
    assert not score("123 !", [{"type": "all_caps"}]).passed and not score("123", [{"type": "all_lowercase"}]).passed
    assert not score("[" * 100000 + "]" * 100000, [{"type": "valid_json"}]).passed  # too deep for json
    assert score("[" * 10 + "]" * 10, [{"type": "valid_json"}]).passed
    assert not score("<<>", [{"type": "wrapped_in", "open": "<<", "close": ">>"}]).passed
    assert score("<<>>", [{"type": "wrapped_in", "open": "<<", "close": ">>"}]).passed
    assert score("One. Two.\nThree", [{"type": "sentence_count", "n": 3}]).passed


@pytest.mark.parametrize("response, valid", [
    ('{"a": 1}', True),
    ('```json\n{"a": [1, 2]}\n```', True),
    ('```json {"a": 1}```', True),  # one line: the opening and the closing fence go independently
    ('  ```JSON\t[1]   ```  ', True),
    ('```\n"text"\n```', True),
    ('{"a": 1}\n```', True),  # a closing fence alone
    ('```json\n{"a": 1}', True),  # an opening fence alone
    ('```json5\n{"a": 1}\n```', False),  # only letters may name the language
    ('``` json\n{"a": 1}```', False),  # whitespace ends the fence: "json" is left in the text
    ('Here it is: {"a": 1}', False),
    ('```json\n{"a": 1}\n```\nDone.', False),
    ('```json\n```', False),
    ("```json\n{'a': 1}\n```", False),
])
def test_valid_json_strips_fences_like_the_paper(response, valid):
    assert score(response, [{"type": "valid_json"}]).passed is valid


def test_strict_conjunction_and_details():
    label = json.dumps([{"type": "no_commas"}, {"type": "word_count_min", "n": 3}, {"type": "all_lowercase"}])
    result = score("one two, three", label)
    assert not result.passed
    assert result.per_constraint == {"0:no_commas": False, "1:word_count_min": True, "2:all_lowercase": True}
    assert (result.satisfied, result.total) == (2, 3)
    assert score("one two three", label).passed


@pytest.mark.parametrize("label, error, message", [
    ('[{"type": "rhymes"}]', UnknownConstraintError, "unknown constraint type 'rhymes'"),
    ("[]", ConstraintError, "empty"),
    ("not json", ConstraintError, "not valid JSON"),
    ('{"type": "no_commas"}', ConstraintError, "JSON list"),
    ('[{"n": 3}]', ConstraintError, "'type'"),
    ('[{"type": "word_count_min"}]', ConstraintError, "takes parameters"),
    ('[{"type": "no_commas", "n": 1}]', ConstraintError, "takes parameters"),
    ('[{"type": "word_count_min", "n": 0}]', ConstraintError, "positive integer"),
    ('[{"type": "word_count_min", "n": true}]', ConstraintError, "positive integer"),
    ('[{"type": "must_include", "values": []}]', ConstraintError, "non-empty list"),
    ('[{"type": "forbidden_chars", "values": ["ab"]}]', ConstraintError, "single letters"),
    ('[{"type": "forbidden_chars", "values": ["1"]}]', ConstraintError, "single letters"),
    ('[{"type": "forbidden_chars", "values": "e"}]', ConstraintError, "non-empty list"),
    ('[{"type": "forbidden_chars", "value": "e"}]', ConstraintError, r"takes parameters \['values'\], got \['value'\]"),
    ('[{"type": "starts_with", "value": " "}]', ConstraintError, "non-empty string"),
    ('["no_commas"]', ConstraintError, "object"),
])
def test_malformed_labels_are_errors_never_a_pass(label, error, message):
    with pytest.raises(error, match=message):
        parse_constraints(label)
    with pytest.raises(error):
        verify("anything", label)


def test_unknown_type_is_a_key_error():
    with pytest.raises(KeyError):
        score("x", [{"type": "no_commas"}, {"type": "nope"}])


def test_trailing_end_of_turn_markers_are_stripped_before_checking():
    ends = [{"type": "ends_with", "value": "THE END"}]
    assert not score("story THE END<|im_end|>", ends).passed  # the raw text fails (reference behaviour)
    assert verify("story THE END<|im_end|>", ends)
    assert verify("STORY<|im_end|>\n<|endoftext|>\n", [{"type": "all_caps"}])
    assert verify('{"a": 1}<|im_end|>', [{"type": "valid_json"}])
    assert verify("one two<|im_end|>", [{"type": "word_count_max", "n": 2}])
    assert not verify("a <|im_end|> b", [{"type": "all_caps"}])  # only trailing markers go
    assert strip_end_of_turn("x <|im_end|> y\n") == "x <|im_end|> y\n"
    assert strip_end_of_turn("x<|endoftext|><|im_end|>") == "x"


@pytest.mark.parametrize(("response", "spec", "strict", "paper"), [
    ("The l\u0430ntern", {"type": "must_exclude", "values": ["lantern"]}, False, True),  # Cyrillic а
    ("The lan\u200btern", {"type": "must_exclude", "values": ["lantern"]}, False, True),  # zero-width space
    ("\uff2c\uff21\uff2e\uff34\uff25\uff32\uff2e", {"type": "must_exclude", "values": ["lantern"]}, False, True),
    ("Th\u0435 \u0435nd", {"type": "forbidden_chars", "values": ["e"]}, False, True),  # Cyrillic е
    ("caf\u00e9", {"type": "forbidden_chars", "values": ["e"]}, False, True),  # an accented e is an e
    ("A big cat", {"type": "forbidden_chars", "values": ["e"]}, True, True),
    ("\u0430\u0440\u0440l\u0435s", {"type": "must_include", "values": ["apples"]}, False, False),  # look-alikes
    ("lan\u200btern", {"type": "must_include", "values": ["lantern"]}, True, False),  # invisible: not there
    ("Answer:\u200b yes", {"type": "starts_with", "value": "Answer:"}, True, True),
    ("one\u200btwo\u200bthree", {"type": "word_count_min", "n": 3}, False, True),  # one word as displayed
])
def test_strict_rules_read_the_text_as_displayed(response, spec, strict, paper):
    assert verify(response, [spec]) is strict
    assert verify(response, [spec], rules="paper") is paper
