"""The injection bank of annealed teacher-trajectory injection: one verified teacher answer per student prompt.

Built once before a run, from the run's own config (its prompts, chat template and in-process teachers):

    python -m dnmopd.trainer.injection_bank --config run.yaml --output bank.pt

Each prompt's label-routed teacher samples one answer (T = 1, top-p 1, `rollout.sampling.max_new_tokens`);
an answer is kept only if it finished (not truncated) and the verifier judges it correct; its token
log-probs under the teacher are recorded. Entries are keyed by the sha256 of the prompt's token ids, so a
bank only matches prompts rendered with the same tokenizer and template. The file is written atomically
with its own sha256 beside it (`<bank>.sha256`), which loading checks.
"""

from __future__ import annotations

import argparse
import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from dnmopd.io import atomic_write, sha256_file

FORMAT = "dnmopd-injection-bank/1"


def prompt_key(prompt_ids) -> str:
    return hashlib.sha256(",".join(str(int(t)) for t in prompt_ids).encode()).hexdigest()


@dataclass(frozen=True)
class BankEntry:
    domain: str
    teacher: str
    response_ids: tuple[int, ...]
    teacher_logp: torch.Tensor


class InjectionBank:
    def __init__(self, entries: dict[str, BankEntry]):
        self.entries = entries

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, prompt_ids) -> BankEntry | None:
        return self.entries.get(prompt_key(prompt_ids))

    @classmethod
    def load(cls, path: str | Path) -> InjectionBank:
        path = Path(path)
        digest_file = path.with_name(path.name + ".sha256")
        if not path.is_file():
            raise FileNotFoundError(f"injection bank {path} not found; build it with "
                                    "`python -m dnmopd.trainer.injection_bank --config <run.yaml> --output <bank>`")
        if digest_file.is_file() and digest_file.read_text().split()[0] != sha256_file(path):
            raise ValueError(f"injection bank {path} does not match its checksum {digest_file}")
        payload = torch.load(path, weights_only=False)
        if payload.get("format") != FORMAT:
            raise ValueError(f"{path}: format {payload.get('format')!r} is not {FORMAT!r}")
        entries = {}
        for key, entry in payload["entries"].items():
            logp = torch.as_tensor(entry["teacher_logp"], dtype=torch.float32)
            if logp.shape != (len(entry["response_ids"]),) or not torch.isfinite(logp).all() or (logp > 0).any():
                raise ValueError(f"{path}: entry {key[:12]} has invalid teacher log-probs")
            entries[key] = BankEntry(entry["domain"], entry["teacher"], tuple(entry["response_ids"]), logp)
        return cls(entries)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        payload = {"format": FORMAT, "entries": {k: {"domain": e.domain, "teacher": e.teacher,
                                                     "response_ids": list(e.response_ids),
                                                     "teacher_logp": e.teacher_logp} for k, e in self.entries.items()}}
        with atomic_write(path, "wb") as f:
            torch.save(payload, f)
        with atomic_write(path.with_name(path.name + ".sha256")) as f:
            f.write(f"{sha256_file(path)}  {path.name}\n")
        return path


def build_bank(config, output: Path, log=print) -> InjectionBank:
    """Generate, verify and score one teacher answer per prompt of the run's prompt set."""
    from dnmopd.data.chat import PromptTokenizer
    from dnmopd.teachers.base import ScoreRequest
    from dnmopd.teachers.inprocess import InProcessTeacher
    from dnmopd.trainer.config import resolve_data_path
    from dnmopd.trainer.prompts import PromptSet
    from dnmopd.trainer.teacher_answers import teacher_answers
    from dnmopd.trainer.verification import Verification

    tokenizer = PromptTokenizer.from_pretrained(config.student.hf_path)
    prompts = PromptSet.load(resolve_data_path(config.data.train_file), tokenizer, domains=config.data.domains,
                             max_prompt_tokens=config.data.max_prompt_tokens,
                             model_vocab=len(tokenizer.tokenizer), on_bad_row=config.data.on_bad_row)
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build the injection bank of a run config (in-process teachers).")
    parser.add_argument("--config", action="append", required=True, help="run config YAML (repeatable)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="key.path=value override")
    parser.add_argument("--output", required=True, type=Path, help="bank file to write (e.g. runs/bank.pt)")
    args = parser.parse_args(argv)
    from dnmopd.config import load_config
    from dnmopd.trainer.config import TrainerConfig

    config = load_config(TrainerConfig, args.config, args.overrides)
    build_bank(config, args.output)


if __name__ == "__main__":
    main()
