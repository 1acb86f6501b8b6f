"""IFEval/IFBench: official checkers, strict prompt-level conjunction, determinism, aborts."""

import random

import pytest

from dnmopd.eval.graders import GraderError
from dnmopd.eval.graders.ifeval import IFGrader, letter_fallback_ids


def row(suite, ids, kwargs, prompt="Write something."):
    return {"id": f"{suite}:t", "prompt": prompt, "instruction_id_list": ids, "kwargs": kwargs}


@pytest.fixture(scope="module")
def ifeval():
    return IFGrader("ifeval")


@pytest.fixture(scope="module")
def ifbench():
    return IFGrader("ifbench")


def test_ifeval_single_instructions(ifeval):
    lower = row("ifeval", ["change_case:english_lowercase"], [{}])
    assert ifeval.grade(lower, ["all of this is lowercase text.", "Not Lowercase.", "   "]) == [True, False, False]
    words = row("ifeval", ["length_constraints:number_words"], [{"relation": "less than", "num_words": 5}])
    assert ifeval.grade(words, ["one two three", "one two three four five six"]) == [True, False]


def test_strict_prompt_level_needs_every_instruction(ifeval):
    both = row("ifeval", ["change_case:english_lowercase", "punctuation:no_comma"], [{}, {}])
    assert ifeval.follows(both, "lowercase, with a comma") == [True, False]
    assert ifeval.grade(both, ["lowercase, with a comma", "lowercase without one"]) == [False, True]


def test_ifbench_single_instructions(ifbench, catalogs):
    question = next(q for q in catalogs["ifbench"].rows if q["instruction_id_list"] == ["count:keywords_multiple"])
    kw = question["kwargs"][0]
    right = " ".join([kw["keyword1"]] + [kw["keyword2"]] * 2 + [kw["keyword3"]] * 3 + [kw["keyword4"]] * 5
                     + [kw["keyword5"]] * 7)
    assert ifbench.grade(question, [right, right + " " + kw["keyword1"], "nothing"]) == [True, False, False]
    conjunctions = row("ifbench", ["count:conjunctions"], [{"small_n": 2}])
    assert ifbench.grade(conjunctions, ["red and blue but not green", "red and blue"]) == [True, False]


def test_random_argument_is_seeded_and_the_callers_state_restored(ifeval):
    fallback = row("ifeval", ["keywords:letter_frequency"], [{"letter": "#", "let_frequency": 3,
                                                             "let_relation": "at least"}])
    answers = ["".join(chr(c) * 3 for c in range(ord("a"), ord("z") + 1)), "aaa bbb", "zzz qqq xxx", "mmmmm"]
    random.seed(123)
    state = random.getstate()
    first = [ifeval.grade(fallback, [a]) for a in answers]
    assert random.getstate() == state
    random.seed(999)
    assert [ifeval.grade(fallback, [a]) for a in reversed(answers)] == list(reversed(first))


def test_unimplemented_instruction_aborts(ifeval):
    with pytest.raises(GraderError, match="does not implement"):
        ifeval.grade(row("ifeval", ["no:such_instruction"], [{}]), ["x"])
    with pytest.raises(GraderError, match="does not implement"):
        ifeval.check_coverage([row("ifeval", ["no:such_instruction"], [{}])])


def test_checker_exception_aborts(ifeval):
    with pytest.raises(GraderError, match="raised"):
        ifeval.grade(row("ifeval", ["length_constraints:number_words"], [{"relation": "about", "num_words": 5}]),
                     ["one two"])


def test_missing_nltk_data_aborts_with_the_fix(ifeval, monkeypatch):
    import nltk

    monkeypatch.setattr(nltk.data, "path", ["/nonexistent-nltk-data"])
    with pytest.raises(GraderError, match="prepare --nltk"):
        ifeval.grade(row("ifeval", ["length_constraints:number_sentences"],
                         [{"relation": "less than", "num_sentences": 3}]), ["One. Two."])


def test_shipped_catalogs_are_covered_and_the_letter_fallback_rows_found(catalogs, ifeval, ifbench):
    ifeval.check_coverage(catalogs["ifeval"].rows)
    ifbench.check_coverage(catalogs["ifbench"].rows)
    assert letter_fallback_ids(catalogs["ifeval"].rows) == ["ifeval:4"]
