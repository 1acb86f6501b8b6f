"""SeqKD-SFT: each domain's teacher answers its prompts once, then the student is fine-tuned on the answers.

Generation (once, on global rank 0, before training; skipped when `sft.data` already exists): the label-routed
teacher of every prompt samples one answer (T = 1, top-p 1, `sft.max_response_tokens`, seed `sft.seed`), no
correctness filter. Rows go to a JSONL file (written atomically) with the prompt, the answer's text and token
ids and its finish reason. Training: the prompt's tokens carry no loss, the answer's do; an answer that
finished keeps its end-of-turn token, a truncated one does not (it never ended). The loss is the token mean
over the whole optimizer batch (not a response mean).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from dnmopd.io import write_jsonl
from dnmopd.trainer.measurements.metric_table import Mean
from dnmopd.trainer.modes.base import Collected, Mode, StepCounts
from dnmopd.trainer.step.batch import TrainBatch
from dnmopd.trainer.step.objectives import TokenCrossEntropy


def generate_answers(config, prompts, tokenizer, output: Path) -> None:
    """Every prompt answered once by its label-routed in-process teacher; rows written atomically to `output`."""
    from dnmopd.rollout.base import SamplingParams
    from dnmopd.trainer.experience.teacher_answers import teacher_answers

    sampling = SamplingParams(temperature=1.0, max_new_tokens=config.sft.max_response_tokens, seed=config.sft.seed)
    purpose = "SeqKD generation (for server-backed teachers, generate the answers there and pass them as sft.data)"
    rows = []
    for teacher_config, _, answers in teacher_answers(config, prompts.prompts, sampling, purpose=purpose):
        for prompt, rollout in answers:
            rows.append({"idx": prompt.index, "prompt": prompt.row["prompt"], "label": prompt.label,
                         "domain": prompt.domain, "prompt_ids": list(prompt.prompt_ids),
                         "response": tokenizer.tokenizer.decode(rollout.response_ids),
                         "response_ids": rollout.response_ids, "finish_reason": rollout.finish_reason,
                         "teacher": teacher_config.name})
    write_jsonl(output, sorted(rows, key=lambda row: row["idx"]))


def load_answers(path: Path, end_id: int, strip_ids: set[int], max_tokens: int) -> list[dict]:
    """Rows with training token ids: trailing end tokens (`strip_ids`) removed, then a finished answer ends with
    exactly one `end_id`; a truncated one (or one cut at `max_tokens`) ends without."""
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            row = json.loads(line)
            response = list(row["response_ids"])
            prompt_ids, domain, finished = row["prompt_ids"], row["domain"], row["finish_reason"] == "stop"
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise ValueError(f"{path}:{number}: not a SeqKD answer row ({err})") from None
        while response and response[-1] in strip_ids:
            response.pop()
        if finished and len(response) < max_tokens:
            response.append(end_id)
        rows.append({"prompt_ids": prompt_ids, "response_ids": response[:max_tokens], "domain": domain})
    if not rows:
        raise ValueError(f"{path}: no SeqKD answers")
    return rows


class SFTMode(Mode):
    uses_rollout = False

    def __init__(self, ctx):
        super().__init__(ctx)
        path = self.config.sft.data or ctx.run_dir / "seqkd.jsonl"
        if not path.exists():
            ctx.run_once(lambda: generate_answers(self.config, ctx.prompts, ctx.tokenizer, path))
        tokenizer = ctx.tokenizer.tokenizer
        end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        strip = {end_id, tokenizer.convert_tokens_to_ids("<|endoftext|>"), tokenizer.eos_token_id} - {None}
        self.rows = load_answers(path, end_id, strip, self.config.sft.max_response_tokens)
        self.sampler = self.config.data.sampler.build(num_prompts=len(self.rows), dp_rank=ctx.layout.dp_rank,
                                                      dp_size=ctx.layout.dp_size)

    def collect(self, update: int) -> Collected:
        rows = [self.rows[i] for i in self.sampler.next_batch().indices]
        if not self.ctx.layout.is_leader:
            return Collected(None)
        domains = self.config.data.domains
        zeros = [torch.zeros(len(r["response_ids"])) for r in rows]
        batch = TrainBatch.from_rows([r["prompt_ids"] for r in rows], [r["response_ids"] for r in rows], zeros,
                                     zeros, [domains.index(r["domain"]) for r in rows])
        tokens = sum(len(r["response_ids"]) for r in rows)
        return Collected(batch, {"response_tokens": float(tokens), "response_length/mean": Mean(tokens, len(rows))})

    def objective(self, counts: StepCounts):
        return TokenCrossEntropy(self.ctx.head, num_tokens=max(counts.tokens, 1))

    def state_dict(self) -> dict:
        return {"sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state["sampler"])
