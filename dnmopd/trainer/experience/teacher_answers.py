"""One answer per prompt from its label-routed teacher, generated in-process: the data of SeqKD-SFT and of the
injection bank."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from dnmopd.data.prompts import Prompt
from dnmopd.hf.inprocess import InProcessModel
from dnmopd.rollout.base import Rollout, RolloutRequest, SamplingParams
from dnmopd.rollout.inprocess import InProcessRollout
from dnmopd.trainer.method import Method


def teacher_answers(config, prompts: Sequence[Prompt], sampling: SamplingParams, *, purpose: str
                    ) -> Iterator[tuple[object, InProcessRollout, list[tuple[Prompt, Rollout]]]]:
    """Per teacher of `config.teachers.models` with prompts routed to it: (its config, the rollout engine that
    holds its model, [(prompt, answer)]). Sample seeds follow prompt indices, so an answer does not depend on
    which other prompts are generated. `purpose` names the caller in the error for a server-backed teacher."""
    method = Method(config.method, config.data.domains)
    for model in config.teachers.models:
        name = model.config.name
        mine = [p for p in prompts if method.router.label_teacher(p.domain) == name]
        if not mine:
            continue
        if not isinstance(model.config, InProcessModel):  # generation needs the model itself, not a server
            raise ValueError(f"{purpose} runs in-process teachers; {name} is {model.backend}")
        engine = InProcessRollout(InProcessRollout.Config(model_path=model.config.model_path,
                                                          device=model.config.device, dtype=model.config.dtype))
        requests = [RolloutRequest(p.prompt_ids, sample_id=p.index) for p in mine]
        yield model.config, engine, list(zip(mine, engine.generate_batch(requests, sampling), strict=True))
