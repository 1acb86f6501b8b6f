"""Build the injection bank of a run (`launch/build_injection_bank.py`), from the run's own config: its prompts
(read as the trainer reads them), chat template and in-process teachers.

Each prompt's label-routed teacher samples one answer (T = 1, top-p 1, `rollout.sampling.max_new_tokens`);
an answer is kept only if it finished (not truncated) and the verifier judges it correct; its token
log-probs under the teacher are recorded.
"""

from __future__ import annotations

from pathlib import Path

from dnmopd.data.chat import PromptTokenizer
from dnmopd.data.prompts import load_run_prompts
from dnmopd.student.arch import StudentArch
from dnmopd.teachers.base import ScoreRequest
from dnmopd.teachers.inprocess import InProcessTeacher
from dnmopd.trainer.experience.teacher_answers import teacher_answers
from dnmopd.trainer.experience.verification import Verification
from dnmopd.trainer.injection.bank import BankEntry, InjectionBank, prompt_key


def build_bank(config, output: Path, log=print) -> InjectionBank:
    """Generate, verify and score one teacher answer per prompt of the run's prompt set; write it to `output`."""
    tokenizer = PromptTokenizer.from_pretrained(config.student.hf_path)
    prompts = load_run_prompts(config.data.train_file, tokenizer, config.data,
                               model_vocab=StudentArch.from_hf_dir(config.student.hf_path).vocab_size)
    entries, tried = {}, 0
    verification = Verification(config.verifiers, {p.domain for p in prompts.prompts})
    try:
        for teacher_config, engine, answers in teacher_answers(config, prompts.prompts, config.rollout.sampling,
                                                               purpose="building an injection bank"):
            scorer = InProcessTeacher(teacher_config, model=engine.model)
            for prompt, rollout in answers:
                tried += 1
                if rollout.finish_reason != "stop":
                    continue
                text = tokenizer.tokenizer.decode(rollout.response_ids)
                if verification.verdict(prompt.domain, text, prompt.label) is not True:  # no verdict: not kept
                    continue
                scores = scorer.score_batch([ScoreRequest((*prompt.prompt_ids, *rollout.response_ids),
                                                          len(prompt.prompt_ids))])[0]
                entries[prompt_key(prompt.prompt_ids)] = BankEntry(
                    prompt.domain, teacher_config.name, tuple(rollout.response_ids), scores.logprobs.float())
            log(f"{teacher_config.name}: {len(entries)} verified answers so far ({tried} prompts tried)")
    finally:
        verification.close()
    bank = InjectionBank(entries)
    bank.save(output)
    log(f"wrote {output}: {len(bank)} entries from {tried} prompts")
    return bank
