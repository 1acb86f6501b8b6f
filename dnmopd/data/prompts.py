"""The run's prompt set: validated rows, each rendered with the student's chat template and tokenized once."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from dnmopd.data.chat import PromptTokenizer, check_vocab, filter_by_prompt_length, row_messages
from dnmopd.data.loading import load_prompts
from dnmopd.data.sample_data import resolve_data_path

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Prompt:
    index: int
    """Row number in the prompt file (0-based, after skipped rows were reported)."""
    prompt_ids: tuple[int, ...]
    domain: str
    """metadata.domain: the domain DN normalizes over and the verifier is chosen by."""
    label: str
    """The row's reference: math answer, code tests (JSON) or IF constraints (JSON)."""
    row: dict


class PromptSet:
    def __init__(self, prompts: list[Prompt]):
        if not prompts:
            raise ValueError("the prompt set is empty after filtering")
        self.prompts = prompts

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, i: int) -> Prompt:
        return self.prompts[i]

    @classmethod
    def load(cls, path: Path, tokenizer: PromptTokenizer, *, domains: list[str], max_prompt_tokens: int,
             model_vocab: int, on_bad_row: str = "fail") -> PromptSet:
        check_vocab(tokenizer.tokenizer, model_vocab, where=f"student ({model_vocab} embedding rows)")
        dataset, report = load_prompts(path, on_error=on_bad_row, streaming=False)
        rows = [dict(row) for row in dataset]
        ids = [tokenizer.encode(row_messages(row)) for row in rows]
        kept, _ = filter_by_prompt_length(ids, max_prompt_tokens, [row["metadata"]["domain"] for row in rows])
        prompts = []
        for i in kept:
            domain = rows[i]["metadata"]["domain"]
            if domain not in domains:
                raise ValueError(f"{path}: row {i + 1} has domain {domain!r}, not one of data.domains {domains}")
            prompts.append(Prompt(i, tuple(ids[i]), domain, rows[i]["label"], rows[i]))
        logger.info("%s: %d prompts (%s)", path, len(prompts), report.summary())
        return cls(prompts)


def load_run_prompts(path: Path, tokenizer: PromptTokenizer, data, *, model_vocab: int) -> PromptSet:
    """A prompt file of a run (data.train_file, a probe or held-out file, the injection bank's prompts), read as
    every one of them is read: `samples:<file>` resolved, the `data` section's domains, max_prompt_tokens and
    on_bad_row, the tokenizer checked against the student's `model_vocab` embedding rows."""
    return PromptSet.load(resolve_data_path(path), tokenizer, domains=data.domains,
                          max_prompt_tokens=data.max_prompt_tokens, model_vocab=model_vocab,
                          on_bad_row=data.on_bad_row)
