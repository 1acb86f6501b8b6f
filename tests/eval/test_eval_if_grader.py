"""IFEval/IFBench: official checkers (IFBench's at the pinned revision), strict and loose prompt-level
verdicts, determinism, and failures that never stop a suite."""

import json
import random

import pytest
from ifbench_pinned_cases import CASES, PUNKT

from dnmopd.eval.grade import grade_run
from dnmopd.eval.graders import GraderError
from dnmopd.eval.graders.ifeval import IFGrader, letter_fallback_ids, loose_variants, missing_nltk
from dnmopd.eval.scores import suite_summary


def row(suite, ids, kwargs, prompt="Write something."):
    return {"id": f"{suite}:t", "prompt": prompt, "instruction_id_list": ids, "kwargs": kwargs}


def correct(verdicts):
    return [v.correct for v in verdicts]


@pytest.fixture(scope="module")
def ifeval():
    return IFGrader("ifeval")


@pytest.fixture(scope="module")
def ifbench():
    return IFGrader("ifbench")


def test_ifeval_single_instructions(ifeval):
    lower = row("ifeval", ["change_case:english_lowercase"], [{}])
    assert correct(ifeval.grade(lower, ["all of this is lowercase text.", "Not Lowercase.", "   "])) == \
        [True, False, False]
    words = row("ifeval", ["length_constraints:number_words"], [{"relation": "less than", "num_words": 5}])
    assert correct(ifeval.grade(words, ["one two three", "one two three four five six"])) == [True, False]


def test_strict_prompt_level_needs_every_instruction(ifeval):
    both = row("ifeval", ["change_case:english_lowercase", "punctuation:no_comma"], [{}, {}])
    assert ifeval.follows(both, "lowercase, with a comma") == ([True, False], [True, False])
    assert correct(ifeval.grade(both, ["lowercase, with a comma", "lowercase without one"])) == [False, True]


def test_loose_reads_the_answer_without_its_first_or_last_line_or_asterisks(ifeval):
    """The official loose rule (evaluation_lib.test_instruction_following_loose): eight readings."""
    assert loose_variants("Sure!\n*body*\nBye") == ["Sure!\n*body*\nBye", "Sure!\nbody\nBye", "*body*\nBye",
                                                    "Sure!\n*body*", "*body*", "body\nBye", "Sure!\nbody", "body"]
    lower = row("ifeval", ["change_case:english_lowercase"], [{}])
    [preamble, shouting] = ifeval.grade(lower, ["Sure! Here it is:\nall lowercase here", "NOT LOWER\nAT ALL"])
    assert (preamble.correct, preamble.loose) == (False, True)
    assert (shouting.correct, shouting.loose) == (False, False)
    no_stars = row("ifeval", ["detectable_format:number_highlighted_sections"], [{"num_highlights": 1}])
    [plain] = ifeval.grade(no_stars, ["nothing highlighted"])
    assert plain.loose == plain.correct is False


@pytest.mark.parametrize(("iid", "kwargs", "prompt", "response", "pinned"), CASES,
                         ids=[f"{case[0]}:{case[3][:20]}" for case in CASES])
def test_ifbench_checkers_are_the_pinned_revisions(ifbench, iid, kwargs, prompt, response, pinned):
    """Crafted answers get the verdicts of allenai/IFBench@1091c4c3 (ifbench_pinned_cases)."""
    if iid in PUNKT and missing_nltk("ifbench", [iid]):
        pytest.skip("needs NLTK's punkt_tab (python launch/evaluate.py prepare --nltk)")
    verdict = ifbench.verdict(row("ifbench", [iid], [kwargs], prompt), response)
    assert verdict.error is None and verdict.correct == pinned


def test_ifbench_sample_questions(ifbench, catalogs):
    question = next(q for q in catalogs["ifbench"].rows if q["instruction_id_list"] == ["count:keywords_multiple"])
    kw = question["kwargs"][0]
    right = " ".join([kw["keyword1"]] + [kw["keyword2"]] * 2 + [kw["keyword3"]] * 3 + [kw["keyword4"]] * 5
                     + [kw["keyword5"]] * 7)
    assert correct(ifbench.grade(question, [right, right + " " + kw["keyword1"], "nothing"])) == [True, False, False]
    conjunctions = row("ifbench", ["count:conjunctions"], [{"small_n": 2}])
    assert correct(ifbench.grade(conjunctions, ["red and blue but not green", "red and blue"])) == [True, False]


def test_a_crashing_checker_fails_its_answers_and_the_suite_completes(ifbench, tmp_path):
    """The 50-crash class: answers of only digits or punctuation on format:quote_unquote made if-verifiable
    0.1.2's checker raise IndexError. The pinned checker grades them (True); with the older checker in its
    place the suite still completes, those answers are wrong and counted in eval_failures with the error."""
    from if_verifiable.ifbench.instructions import QuoteExplanationChecker as Older

    question = {**row("ifbench", ["format:quote_unquote"], [{}]), "input_sha256": "0" * 64}
    answers = [".", "123", "Fine, no quotes here", "?!"]
    assert correct(ifbench.grade(question, answers)) == [True, True, True, True]
    raw = tmp_path / "raw" / "0000.json"
    raw.parent.mkdir()
    raw.write_text(json.dumps([{**question, "n": 4, "responses": answers, "token_counts": [1] * 4,
                                "finish_reasons": ["stop"] * 4}]))
    older = IFGrader("ifbench")
    older.registry = {**older.registry, "format:quote_unquote": Older}
    [record] = grade_run(tmp_path, [raw], [question], older)
    assert record["correct"] == "0010" and record["loose"] == "0010"
    assert [e["answer"] for e in record["errors"]] == [0, 1, 3]
    assert all("the checker of format:quote_unquote raised IndexError" in e["error"] for e in record["errors"])
    summary = suite_summary("ifbench", [record], grader_revision=older.revision, deviations=[])
    assert summary["eval_failures"] == 3 and summary["score"] == 25.0 and summary["score_loose"] == 25.0


def test_random_argument_is_seeded_and_the_callers_state_restored(ifeval):
    fallback = row("ifeval", ["keywords:letter_frequency"], [{"letter": "#", "let_frequency": 3,
                                                             "let_relation": "at least"}])
    answers = ["".join(chr(c) * 3 for c in range(ord("a"), ord("z") + 1)), "aaa bbb", "zzz qqq xxx", "mmmmm"]
    random.seed(123)
    state = random.getstate()
    first = [correct(ifeval.grade(fallback, [a])) for a in answers]
    assert random.getstate() == state
    random.seed(999)
    assert [correct(ifeval.grade(fallback, [a])) for a in reversed(answers)] == list(reversed(first))


def test_unimplemented_instruction_stops_grading(ifeval):
    with pytest.raises(GraderError, match="does not implement"):
        ifeval.grade(row("ifeval", ["no:such_instruction"], [{}]), ["x"])
    with pytest.raises(GraderError, match="does not implement"):
        ifeval.check_coverage([row("ifeval", ["no:such_instruction"], [{}])])


def test_checker_exception_fails_the_answer_and_says_which(ifeval):
    [verdict] = ifeval.grade(row("ifeval", ["length_constraints:number_words"],
                                 [{"relation": "about", "num_words": 5}]), ["one two"])
    assert not verdict.correct and verdict.loose is False
    assert verdict.error.startswith("ifeval:t: the checker of length_constraints:number_words raised ValueError")


def test_missing_nltk_data_stops_before_grading_with_the_fix(ifeval, ifbench, monkeypatch):
    import nltk

    monkeypatch.setattr(nltk.data, "path", ["/nonexistent-nltk-data"])
    with pytest.raises(GraderError, match="prepare --nltk"):
        ifeval.grade(row("ifeval", ["length_constraints:number_sentences"],
                         [{"relation": "less than", "num_sentences": 3}]), ["One. Two."])
    with pytest.raises(GraderError, match="averaged_perceptron_tagger_eng \\(read by words:start_verb\\)"):
        ifbench.check_coverage([row("ifbench", ["words:start_verb"], [{}])])


def test_shipped_catalogs_are_covered_and_the_letter_fallback_rows_found(catalogs, ifeval, ifbench):
    ifeval.check_coverage([q for q in catalogs["ifeval"].rows if not missing_nltk("ifeval", q["instruction_id_list"])])
    ifbench.check_coverage(
        [q for q in catalogs["ifbench"].rows if not missing_nltk("ifbench", q["instruction_id_list"])])
    assert letter_fallback_ids(catalogs["ifeval"].rows) == ["ifeval:4"]
