"""IFEval and IFBench: strict prompt-level accuracy with the official instruction checkers.

The checkers are those ``if-verifiable`` packages (Google's IFEval registry and AllenAI's IFBench registry,
with light dependencies); the loop around them is the official ``test_instruction_following_strict``: a
fresh checker per instruction, ``build_description(**kwargs)`` then again with the prompt when the checker
takes one, and an instruction is followed iff the response is not blank and ``check_following`` holds. An
answer is correct iff it follows every instruction of its prompt.

Determinism (revision ``deterministic-official-v1-20260918``): some ``build_description`` paths draw a
missing argument from ``random`` (IFEval's non-letter ``letter`` arguments '#' and '!'), and langdetect
seeds itself per call, so every answer is checked under ``random.seed(0)`` (the caller's state restored
afterwards) with ``DetectorFactory.seed = 0``. An instruction id the registry does not implement, and any
exception a checker raises, stop grading (``GraderError``): they are never scored.

NLTK data (sentence splitting, stop words, part-of-speech tags) is read from ``nltk_data`` (``prepare
--nltk`` fetches it) and never downloaded while grading: ``if_verifiable``'s IFBench module would download
it at import time, which is prevented here, and a checker that needs a missing resource stops grading
with the name of the resource.
"""

from __future__ import annotations

import contextlib
import importlib
import random
from collections.abc import Iterator, Sequence
from importlib.metadata import version
from pathlib import Path

from dnmopd.eval.graders.errors import GraderError
from dnmopd.eval.protocol import IF_GRADING_SEED

REVISION = "deterministic-official-v1-20260918"
NLTK_RESOURCES = ("tokenizers/punkt_tab", "corpora/stopwords", "taggers/averaged_perceptron_tagger_eng")
"""What the checkers read; ``prepare --nltk`` fetches exactly these."""
_REGISTRIES = {"ifeval": "if_verifiable.ifeval.instructions_registry",
               "ifbench": "if_verifiable.ifbench.instructions_registry"}


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
    """The official instruction registry of ``ifeval`` or ``ifbench``, imported without network access."""
    import nltk
    from langdetect import DetectorFactory

    if nltk_data is not None and str(nltk_data) not in nltk.data.path:
        nltk.data.path.insert(0, str(nltk_data))
    DetectorFactory.seed = IF_GRADING_SEED
    with _no_downloads():
        return importlib.import_module(_REGISTRIES[suite]).INSTRUCTION_DICT


def letter_fallback_ids(rows: Sequence[dict]) -> list[str]:
    """IFEval questions whose ``letter`` argument is not a letter (the checker then draws one at random)."""
    return [row["id"] for row in rows
            if any(iid == "keywords:letter_frequency" and not (len(kw.get("letter") or "") == 1
                                                              and "a" <= kw["letter"].lower() <= "z")
                   for iid, kw in zip(row["instruction_id_list"], row["kwargs"], strict=True))]


class IFGrader:
    def __init__(self, suite: str, *, nltk_data: str | Path | None = None):
        if suite not in _REGISTRIES:
            raise ValueError(f"IFGrader: suite must be ifeval or ifbench, got {suite!r}")
        self.suite = suite
        self.registry = registry(suite, nltk_data)
        self.revision = f"{REVISION}+if-verifiable=={version('if-verifiable')}"

    def check_coverage(self, rows: Sequence[dict]) -> None:
        """Every instruction of every question must be implemented, else grading does not start."""
        missing = sorted({f"{row['id']}: {iid}" for row in rows for iid in row["instruction_id_list"]
                          if iid not in self.registry})
        if missing:
            raise GraderError(f"{self.suite}: instructions the official registry does not implement: "
                              f"{'; '.join(missing[:10])}")

    def follows(self, row: dict, response: str) -> list[bool]:
        """Per instruction of ``row``: does ``response`` follow it (strict)?"""
        self.check_coverage([row])
        verdicts = []
        with seeded_random(IF_GRADING_SEED):
            for iid, kwargs in zip(row["instruction_id_list"], row["kwargs"], strict=True):
                checker = self.registry[iid](iid)
                try:
                    checker.build_description(**kwargs)
                    args = checker.get_instruction_args()
                    if args and "prompt" in args:
                        checker.build_description(prompt=row["prompt"])
                    verdicts.append(bool(response.strip() and checker.check_following(response)))
                except LookupError as exc:
                    raise GraderError(f"{row['id']}: instruction {iid} needs NLTK data that is not installed "
                                      f"(run `python launch/evaluate.py prepare --nltk`): {exc}") from exc
                except Exception as exc:
                    raise GraderError(f"{row['id']}: the checker of {iid} raised {type(exc).__name__}: {exc}") \
                        from exc
        return verdicts

    def grade(self, row: dict, responses: Sequence[str]) -> list[bool]:
        return [all(self.follows(row, response)) for response in responses]
