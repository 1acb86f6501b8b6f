"""The teacher self-test before update 1: is a teacher the model the student should learn from, and does it
really score?

A teacher that returns uniform or zero-filled log-probs, or reads the student's tokens with another vocabulary
or chat template, fails silently: the run trains, on a wrong target. `self_test` checks a teacher against the
student, in this order; the first check that fails is the result's `cause`:

    vocabulary        the tokenizers' vocabularies are the same (size, and every token's id); the teacher model
                      has an output row for every student token
    special_tokens    every special token (eos, pad, the chat markers ...) has the same id in both
    chat_template     probe conversations rendered by each chat template have the same sha256
    scoring           the teacher scores PAIRS (rendered with the student's template) without an error
    non_finite        every log-prob is finite
    zero_filled       not every log-prob is exactly 0
    uniform           not every log-prob is -ln(V) (V: the teacher's output rows), within UNIFORM_TOLERANCE
    constant          not every log-prob is the same value
    nondeterministic  PAIRS scored again give the same log-probs (mean |difference| <= REPEAT_TOLERANCE)
    greedy            the teacher's mean log-prob on its own greedy continuation of each prompt (GREEDY_TOKENS
                      tokens, scored as a response) is above the uniform baseline -ln(V) by GREEDY_MARGIN

It costs two scoring calls of the three pairs, three greedy continuations and one more scoring call (the CPU
demo's three teachers: the figure in `TeachersConfig.self_test`). The result has a plain-dict form
(`to_dict()`) for the run's records.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from dnmopd.data.chat import ChatTemplateError, PromptTokenizer
from dnmopd.serving.blocking import run_blocking
from dnmopd.serving.errors import ServingError
from dnmopd.teachers.base import ScoreRequest, TeacherError, TeacherScorer

PAIRS = (
    ([{"role": "user", "content": "What is 7 times 8? Put the answer in \\boxed{}."}],
     "7 times 8 is 56, so the answer is \\boxed{56}."),
    ([{"role": "user", "content": "Write a Python function that returns the sum of a list."}],
     "def total(nums):\n    return sum(nums)"),
    ([{"role": "system", "content": "You answer briefly."},
      {"role": "user", "content": "Answer in exactly two words: what color is the sky?"}],
     "Usually blue."),
)
"""Fixed prompt + response pairs: the student's chat template renders the prompts; the response ends with eos."""
TEMPLATE_PROBES = (
    ({"role": "system", "content": "You are a careful assistant."},
     {"role": "user", "content": "Name a prime number."},
     {"role": "assistant", "content": "7 is prime."},
     {"role": "user", "content": "And an even one?"}),
    ({"role": "user", "content": "Name a prime number."},),
)
"""Conversations whose rendering by each chat template is compared: a system message, history and the generation
prompt; and a lone user turn (a template that adds a default system message differs there)."""
UNIFORM_TOLERANCE = 1e-3
"""Largest |log-prob + ln V| of a uniform distribution (float32 log-softmax of equal logits is exact to ~1e-6)."""
REPEAT_TOLERANCE = 2e-2
"""Largest mean |difference| between two scorings of the same pairs: bf16 servers differ by ~1e-2 between batch
compositions (the weight probe's tolerance, for the same reason); dropout left on differs by ~1."""
GREEDY_TOKENS = 8
"""Tokens of each greedy continuation."""
GREEDY_MARGIN = 1e-3
"""Nats per token by which the greedy continuation must beat the uniform baseline: a uniform teacher's greedy
tokens sit exactly on it; even the randomly initialized tiny test models' lie ~2 nats above it."""


@dataclass(slots=True)
class SelfTestResult:
    teacher: str
    passed: bool
    cause: str | None = None
    """The first failed check (module docstring), None when passed."""
    detail: str = ""
    """What the failed check saw, in words."""
    measured: dict[str, Any] = field(default_factory=dict)
    """What the checks measured (vocabulary sizes, hashes, mean log-probs, the repeat difference ...)."""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        if self.passed:
            return f"teacher {self.teacher} passed its self-test in {self.seconds:.2f} s"
        return f"teacher {self.teacher} failed its self-test ({self.cause}): {self.detail}"


class TeacherSelfTestError(TeacherError):
    """A teacher failed its self-test: the run is refused (`teachers.self_test: false` skips the test)."""

    def __init__(self, result: SelfTestResult):
        super().__init__(f"{result.summary()} (teachers.self_test: false skips this test)")
        self.result = result


class _Failed(Exception):
    def __init__(self, cause: str, detail: str):
        super().__init__(detail)
        self.cause = cause


def self_test(teacher: TeacherScorer, *, teacher_path: str | Path, student: PromptTokenizer,
              student_vocab: int) -> SelfTestResult:
    """Check `teacher` (its model folder `teacher_path`) against the student (its prompt tokenizer and its model's
    vocabulary rows). Never raises for a failed check: the result says which one failed."""
    started = time.monotonic()
    result = SelfTestResult(teacher.name, passed=True)
    try:
        teacher_tokens = _tokenizer(teacher_path)
        _check_vocabulary(student.tokenizer, teacher_tokens, student_vocab, teacher.vocab_size, result.measured)
        _check_special_tokens(student.tokenizer, teacher_tokens)
        _check_template(student, teacher_tokens, teacher_path, result.measured)
        requests = [_request(student, messages, response) for messages, response in PAIRS]
        first = _score(teacher, requests)
        _check_values(first, teacher.vocab_size, result.measured)
        _check_repeat(first, _score(teacher, requests), result.measured)
        _check_greedy(teacher, requests, result.measured)
    except _Failed as failure:
        result.passed, result.cause, result.detail = False, failure.cause, str(failure)
    result.seconds = time.monotonic() - started
    return result


def _tokenizer(path: str | Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as error:
        raise _Failed("vocabulary", f"cannot load the tokenizer of {path}: {error}") from None


def _vocab_digest(tokenizer) -> str:
    return hashlib.sha256(json.dumps(sorted(tokenizer.get_vocab().items())).encode()).hexdigest()


def _check_vocabulary(student, teacher, student_rows: int, teacher_rows: int, measured: dict) -> None:
    measured.update(student_tokens=len(student), teacher_tokens=len(teacher), student_vocab_rows=student_rows,
                    teacher_vocab_rows=teacher_rows)
    if len(student) != len(teacher):
        raise _Failed("vocabulary", f"the teacher's tokenizer has {len(teacher)} tokens, the student's {len(student)}")
    if _vocab_digest(student) != _vocab_digest(teacher):
        differing = sorted(set(student.get_vocab().items()) ^ set(teacher.get_vocab().items()))[:3]
        raise _Failed("vocabulary", f"the tokenizers map tokens to different ids, e.g. {differing}")
    if teacher_rows < student_rows:
        raise _Failed("vocabulary", f"the teacher model has {teacher_rows} output rows, fewer than the student's "
                                    f"{student_rows}")


def _check_special_tokens(student, teacher) -> None:
    only = sorted(set(student.all_special_tokens) ^ set(teacher.all_special_tokens))
    if only:
        raise _Failed("special_tokens", f"special tokens of one tokenizer only: {only}")
    for token in sorted(student.all_special_tokens):
        ids = student.convert_tokens_to_ids(token), teacher.convert_tokens_to_ids(token)
        if ids[0] != ids[1]:
            raise _Failed("special_tokens", f"special token {token!r} is id {ids[0]} for the student and {ids[1]} "
                                            "for the teacher")
    for role in ("eos", "pad", "bos"):
        ids = getattr(student, f"{role}_token_id"), getattr(teacher, f"{role}_token_id")
        if ids[0] != ids[1]:
            raise _Failed("special_tokens", f"the {role} token is id {ids[0]} for the student and {ids[1]} for the "
                                            "teacher")


def _check_template(student: PromptTokenizer, teacher_tokens, teacher_path, measured: dict) -> None:
    try:
        theirs = PromptTokenizer(teacher_tokens, enable_thinking=student.enable_thinking, source=str(teacher_path))
        rendered = [theirs.render(probe) for probe in TEMPLATE_PROBES]
    except ChatTemplateError as error:
        raise _Failed("chat_template", str(error)) from None
    texts = ("".join(student.render(probe) for probe in TEMPLATE_PROBES), "".join(rendered))
    digests = [hashlib.sha256(text.encode()).hexdigest() for text in texts]
    measured.update(student_template_sha256=digests[0], teacher_template_sha256=digests[1])
    if digests[0] != digests[1]:
        raise _Failed("chat_template", f"the probe conversations render differently (sha256 {digests[0][:12]} for "
                                       f"the student, {digests[1][:12]} for the teacher): the teacher would score "
                                       "the student's tokens in a format it was not trained on")


def _request(student: PromptTokenizer, messages, response: str) -> ScoreRequest:
    prompt = student.encode(messages)
    tokens = student.tokenizer(response, add_special_tokens=False)["input_ids"] + [student.tokenizer.eos_token_id]
    return ScoreRequest(tuple(prompt + tokens), len(prompt))


def _score(teacher: TeacherScorer, requests: list[ScoreRequest]) -> torch.Tensor:
    """Every response log-prob of `requests`, concatenated, float64."""
    try:
        scores = teacher.score_batch(requests)
    except (TeacherError, ServingError) as error:
        raise _Failed("scoring", f"scoring the self-test pairs failed: {error}") from None
    return torch.cat([s.logprobs.double().flatten() for s in scores])


def _check_values(logprobs: torch.Tensor, vocab_rows: int, measured: dict) -> None:
    baseline = -math.log(vocab_rows)
    if not bool(torch.isfinite(logprobs).all()):
        raise _Failed("non_finite", f"non-finite log-probs: {logprobs.tolist()}")
    measured.update(tokens=logprobs.numel(), mean_logprob=logprobs.mean().item(), uniform_baseline=baseline)
    if bool((logprobs == 0).all()):
        raise _Failed("zero_filled", f"all {logprobs.numel()} log-probs are exactly 0")
    if bool(((logprobs - baseline).abs() <= UNIFORM_TOLERANCE).all()):
        raise _Failed("uniform", f"all {logprobs.numel()} log-probs equal -ln({vocab_rows}) = {baseline:.4f}: the "
                                 "teacher's distribution is uniform")
    spread = (logprobs.max() - logprobs.min()).item()
    if spread <= UNIFORM_TOLERANCE:
        raise _Failed("constant", f"all {logprobs.numel()} log-probs are {logprobs[0].item():.4f} (spread "
                                  f"{spread:.2g}): the teacher ignores the tokens it scores")


def _check_repeat(first: torch.Tensor, second: torch.Tensor, measured: dict) -> None:
    difference = (first - second).abs()
    measured.update(repeat_mean_abs_diff=difference.mean().item(), repeat_max_abs_diff=difference.max().item())
    if difference.mean().item() > REPEAT_TOLERANCE:
        raise _Failed("nondeterministic", f"scoring the same pairs twice differed by {difference.mean().item():.3g} "
                                          f"on average (at most {difference.max().item():.3g}; tolerance "
                                          f"{REPEAT_TOLERANCE:g}): dropout left on, or another model answered")


def _check_greedy(teacher: TeacherScorer, requests: list[ScoreRequest], measured: dict) -> None:
    async def continuations() -> list[list[int]]:
        return [await teacher.greedy(r.token_ids[: r.prompt_len], GREEDY_TOKENS) for r in requests]

    try:
        greedy = run_blocking(continuations())
    except (TeacherError, ServingError) as error:
        raise _Failed("greedy", f"greedy continuation failed: {error}") from None
    scored = [ScoreRequest(r.token_ids[: r.prompt_len] + tuple(ids), r.prompt_len) for r, ids in
              zip(requests, greedy, strict=True) if ids]
    if not scored:
        raise _Failed("greedy", "the teacher's greedy continuations are all empty")
    mean = _score(teacher, scored).mean().item()
    baseline = -math.log(teacher.vocab_size)
    measured.update(greedy_mean_logprob=mean)
    if not mean > baseline + GREEDY_MARGIN:
        raise _Failed("greedy", f"the teacher's mean log-prob on its own greedy continuations is {mean:.4f}, not "
                                f"above the uniform baseline -ln({teacher.vocab_size}) = {baseline:.4f}")
