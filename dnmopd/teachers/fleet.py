"""Multi-teacher scoring with a failure policy.

`TeacherFleet.score_one` scores one sample with its routed teacher; the trainer's experience collector
(`dnmopd.trainer.experience.collector`) calls it the moment each rollout finishes, so teacher prefill overlaps with the
generation of the rest of the batch. A sample whose teacher still fails after the pool's retries, or that
its server refuses (HTTP 4xx, e.g. longer than the teacher's context), is handled by `on_failure`:

- `mask`: the sample is kept with `ok=False` and no scores; the trainer gives it advantage 0 on every token.
  Failures are counted per teacher (`failures`) and logged with the server's message.
- `stop`: the whole batch stops with `TeacherBatchError` naming the teacher, the sample and the cause.

Invalid token ids are a bug upstream, not a teacher failure: they always stop the batch.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from dnmopd.serving.errors import ServingError
from dnmopd.teachers.base import ScoreRequest, TeacherError, TeacherScorer, TeacherScores

logger = logging.getLogger(__name__)

FAILURE_POLICIES = ("mask", "stop")


class TeacherBatchError(RuntimeError):
    """A sample could not be scored and the policy is `stop`."""


@dataclass(slots=True)
class ScoredSample:
    index: int
    """Position of the sample in the batch."""
    teacher: str
    request: ScoreRequest
    scores: TeacherScores | None
    """None when the teacher failed (`ok` is False)."""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.scores is not None


class TeacherFleet:
    @dataclass(kw_only=True, slots=True)
    class Config:
        on_failure: str = "mask"
        """`mask`: a sample whose teacher failed gets advantage 0 (counted, logged); `stop`: the batch fails."""

        def __post_init__(self):
            if self.on_failure not in FAILURE_POLICIES:
                raise ValueError(f"TeacherFleet.Config.on_failure={self.on_failure!r}: use one of {FAILURE_POLICIES}")

        def build(self, teachers: Mapping[str, TeacherScorer]) -> TeacherFleet:
            return TeacherFleet(self, teachers)

    def __init__(self, config: Config, teachers: Mapping[str, TeacherScorer]):
        if not teachers:
            raise ValueError("TeacherFleet: no teachers given")
        self.config = config
        self.teachers = dict(teachers)
        self.failures: Counter[str] = Counter()
        self.scored: Counter[str] = Counter()

    def teacher(self, name: str) -> TeacherScorer:
        if name not in self.teachers:
            raise KeyError(f"no teacher named {name!r}; known teachers: {sorted(self.teachers)}")
        return self.teachers[name]

    async def score_one(self, index: int, teacher_name: str, request: ScoreRequest) -> ScoredSample:
        """Sample `index` scored by its teacher, under the failure policy."""
        teacher = self.teacher(teacher_name)
        try:
            outcome = await teacher.score(request)
        except (TeacherError, ServingError) as error:
            outcome = error
        return self._judge(index, teacher_name, request, outcome)

    def _judge(self, index: int, teacher_name: str, request: ScoreRequest,
               outcome: TeacherScores | Exception) -> ScoredSample:
        """The failure policy applied to one sample's outcome (its scores, or the error that ended it)."""
        if isinstance(outcome, Exception):
            self.failures[teacher_name] += 1
            logger.warning("teacher %s failed on sample %d (%s policy): %s",
                           teacher_name, index, self.config.on_failure, outcome)
            if self.config.on_failure == "stop":
                raise TeacherBatchError(f"teacher {teacher_name} failed on sample {index}: {outcome}") from outcome
            return ScoredSample(index, teacher_name, request, None, str(outcome))
        self.scored[teacher_name] += 1
        return ScoredSample(index, teacher_name, request, outcome)

