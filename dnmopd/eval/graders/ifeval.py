"""IFEval and IFBench: strict and loose prompt-level accuracy with the official instruction checkers.

The checkers: IFEval's are Google's registry as ``if-verifiable`` packages it (identical ``check_following``
to lm-eval's copy); IFBench's are those of the published results, ``ifbench_pinned.pinned_registry``
(allenai/IFBench at ``protocol.IFBENCH_CHECKERS``, if-verifiable's classes where that revision did not change
them). The loop around them is the official one (``evaluation_lib``): a fresh checker per instruction,
``build_description(**kwargs)`` then again with the prompt when the checker takes one. Strict: an instruction
is followed iff the response is not blank and ``check_following`` holds. Loose (the official upper bound):
iff one of eight variants holds, the response, it without its first line, without its last line, without
both (those stripped), and each of the four with every ``*`` deleted, blank variants skipped. An answer is
correct iff it follows every instruction of its prompt (strict; ``Verdict.loose`` the same with loose).

Determinism (revision ``deterministic-official-v1-20260918``): some ``build_description`` paths draw a
missing argument from ``random`` (IFEval's non-letter ``letter`` arguments '#' and '!'), and langdetect
seeds itself per call, so every answer is checked under ``random.seed(0)`` (the caller's state restored
afterwards) with ``DetectorFactory.seed = 0``; the loose checks reuse the strict checker (the official loop
builds a second one, which draws again).

A checker that raises on an answer scores that answer wrong, strict and loose, with the error in its
`Verdict` (counted in ``eval_failures``); grading goes on. An instruction id the registry does not implement
stops grading (``GraderError``) before anything is generated, and so does missing NLTK data: the checkers read
sentence splitting (``punkt_tab``), stop words and (``words:start_verb``) part-of-speech tags from
``nltk_data`` (``prepare --nltk`` fetches them), never downloading while grading (``if_verifiable``'s IFBench
module would download at import time, which is prevented here).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path

from dnmopd.eval.graders.errors import GraderError
from dnmopd.eval.graders.verdict import Verdict, failed
from dnmopd.eval.protocol import IF_GRADING_SEED, IFBENCH_CHECKERS

REVISION = "deterministic-official-v2-20261205"
NLTK_RESOURCES = ("tokenizers/punkt_tab", "corpora/stopwords", "taggers/averaged_perceptron_tagger_eng")
"""What the checkers read; ``prepare --nltk`` fetches exactly these."""
NLTK_NEEDS = {
    "tokenizers/punkt_tab": {
        "ifeval": ("change_case:capital_word_frequency", "length_constraints:number_sentences"),
        "ifbench": ("count:pronouns", "custom:sentence_alphabet", "format:emoji", "format:no_bullets_bullets",
                    "format:title_case", "ratio:sentence_balance", "ratio:sentence_type", "ratio:sentence_words",
                    "sentence:alliteration_increment", "sentence:increment", "sentence:keyword",
                    "words:keywords_specific_position", "words:last_first", "words:start_verb",
                    "words:words_position")},
    "corpora/stopwords": {"ifbench": ("ratio:stop_words",)},
    "taggers/averaged_perceptron_tagger_eng": {"ifbench": ("words:start_verb",)},
}
"""Resource -> suite -> the instructions whose checkers read it (found by running each checker of the two
registries without it); `IFGrader.check_coverage` requires them for the questions it is given."""


@contextlib.contextmanager
def _no_downloads() -> Iterator[None]:
    import nltk

    def refuse(*args, **kwargs):
        return False

    real = nltk.download
    nltk.download = refuse
    try:
        yield
    finally:
        nltk.download = real


@contextlib.contextmanager
def seeded_random(seed: int) -> Iterator[None]:
    """``random.seed(seed)`` for the block; the caller's generator state is restored afterwards."""
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


def registry(suite: str, nltk_data: str | Path | None = None) -> dict:
    """The instruction registry of ``ifeval`` or ``ifbench`` (see the module docstring), imported without
    network access."""
    import nltk
    from langdetect import DetectorFactory

    if nltk_data is not None and str(nltk_data) not in nltk.data.path:
        nltk.data.path.insert(0, str(nltk_data))
    DetectorFactory.seed = IF_GRADING_SEED
    with _no_downloads():
        if suite == "ifeval":
            from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT

            return INSTRUCTION_DICT
        from dnmopd.eval.graders.ifbench_pinned import pinned_registry

        return pinned_registry()


def missing_nltk(suite: str, instruction_ids) -> dict[str, list[str]]:
    """NLTK resource -> the instructions among ``instruction_ids`` that need it, for resources not installed."""
    import nltk

    missing = {}
    for resource, suites in NLTK_NEEDS.items():
        needing = sorted(set(instruction_ids) & set(suites.get(suite, ())))
        if needing:
            try:
                nltk.data.find(resource)
            except LookupError:
                missing[resource] = needing
    return missing


def loose_variants(response: str) -> list[str]:
    """The official loose rule's eight readings of a response."""
    lines = response.split("\n")
    cut = ["\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]
    return [response, response.replace("*", ""), *cut, *(text.replace("*", "") for text in cut)]


class CheckerFailed(Exception):
    """A checker raised on an answer (the exception is its ``__cause__``)."""


def letter_fallback_ids(rows: Sequence[dict]) -> list[str]:
    """IFEval questions whose ``letter`` argument is not a letter (the checker then draws one at random)."""
    return [row["id"] for row in rows
            if any(iid == "keywords:letter_frequency" and not (len(kw.get("letter") or "") == 1
                                                              and "a" <= kw["letter"].lower() <= "z")
                   for iid, kw in zip(row["instruction_id_list"], row["kwargs"], strict=True))]


class IFGrader:
    measures = ("loose",)

    def __init__(self, suite: str, *, nltk_data: str | Path | None = None):
        if suite not in ("ifeval", "ifbench"):
            raise ValueError(f"IFGrader: suite must be ifeval or ifbench, got {suite!r}")
        self.suite = suite
        self.registry = registry(suite, nltk_data)
        pinned = f"+allenai-IFBench@{IFBENCH_CHECKERS[1][:8]}" if suite == "ifbench" else ""
        self.revision = f"{REVISION}+if-verifiable=={version('if-verifiable')}{pinned}"

    def check_coverage(self, rows: Sequence[dict]) -> None:
        """Every instruction of every question must be implemented and its NLTK data installed, else grading
        does not start."""
        missing = sorted({f"{row['id']}: {iid}" for row in rows for iid in row["instruction_id_list"]
                          if iid not in self.registry})
        if missing:
            raise GraderError(f"{self.suite}: instructions the official registry does not implement: "
                              f"{'; '.join(missing[:10])}")
        lacking = missing_nltk(self.suite, {iid for row in rows for iid in row["instruction_id_list"]})
        if lacking:
            raise GraderError(f"{self.suite}: NLTK data not installed: " + "; ".join(
                f"{resource} (read by {', '.join(ids)})" for resource, ids in lacking.items())
                + ". Run `python launch/evaluate.py prepare --nltk` where NLTK's server is reachable "
                  "(docs/evaluation.md: no package ships averaged_perceptron_tagger_eng, so words:start_verb "
                  "is unavailable without it)")

    def follows(self, row: dict, response: str) -> tuple[list[bool], list[bool]]:
        """Per instruction of ``row``: does ``response`` follow it, strict and loose? A checker's exception
        is raised as `CheckerFailed` (naming its instruction) from it; missing NLTK data as `GraderError`."""
        self.check_coverage([row])
        strict, loose = [], []
        with seeded_random(IF_GRADING_SEED), self._splitter():
            for iid, kwargs in zip(row["instruction_id_list"], row["kwargs"], strict=True):
                try:
                    checker = self.registry[iid](iid)
                    checker.build_description(**kwargs)
                    args = checker.get_instruction_args()
                    if args and "prompt" in args:
                        checker.build_description(prompt=row["prompt"])
                    strict.append(bool(response.strip() and checker.check_following(response)))
                    loose.append(strict[-1] or any(text.strip() and checker.check_following(text)
                                                   for text in loose_variants(response)[1:]))
                except Exception as error:
                    if type(error) is LookupError and "nltk" in str(error).lower():  # not KeyError/IndexError
                        raise GraderError(f"{row['id']}: the checker of {iid} needs NLTK data that is not "
                                          f"installed (run `python launch/evaluate.py prepare --nltk`): "
                                          f"{error}") from error
                    raise CheckerFailed(f"{row['id']}: the checker of {iid}") from error
        return strict, loose

    def _splitter(self):
        if self.suite == "ifbench":
            from dnmopd.eval.graders.ifbench_pinned import pinned_sentences

            return pinned_sentences()
        return contextlib.nullcontext()

    def verdict(self, row: dict, response: str) -> Verdict:
        try:
            strict, loose = self.follows(row, response)
        except CheckerFailed as failure:  # the answer's failure, not the grader's: it is wrong, grading goes on
            return replace(failed(failure.__cause__, str(failure)), loose=False)
        return Verdict(all(strict), loose=all(loose))

    def grade(self, row: dict, responses: Sequence[str]) -> list[Verdict]:
        return [self.verdict(row, response) for response in responses]
