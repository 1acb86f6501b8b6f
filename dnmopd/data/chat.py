"""Prompt rows -> chat text -> token ids, through the model directory's own tokenizer and chat template.

Rendering follows the trainer's rule (reference-behavior 5.2, 2.7)::

    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, enable_thinking=False)
    ids  = tokenizer(text, add_special_tokens=False).input_ids

In non-thinking mode the rendered prompt must end with the empty think block ``<think>\\n\\n</think>\\n\\n``
(Qwen3.5 and Qwen3 both render it); a template that does not is refused, since the student would otherwise
be trained on a different prompt format than the one it is served with.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dnmopd.data.chat_templates import EMPTY_THINK_BLOCK

logger = logging.getLogger(__name__)


class ChatTemplateError(ValueError):
    """The tokenizer's chat template does not render prompts the way the trainer needs."""


def row_messages(row: Mapping) -> list[dict]:
    """The chat messages of a dataset row (a plain-string prompt becomes one user message)."""
    prompt = row["prompt"]
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


class PromptTokenizer:
    """Renders and tokenizes prompts with a Hugging Face tokenizer (``from_pretrained(model_dir)``)."""

    def __init__(self, tokenizer, *, enable_thinking: bool = False, source: str = "tokenizer") -> None:
        self.tokenizer = tokenizer
        self.enable_thinking = enable_thinking
        self.source = source
        if getattr(tokenizer, "chat_template", None) is None:
            raise ChatTemplateError(f"{source}: the tokenizer has no chat template")
        if not enable_thinking:
            self._check_think_tokens()

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, *, enable_thinking: bool = False) -> PromptTokenizer:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(model_dir)), enable_thinking=enable_thinking,
                   source=str(model_dir))

    def _check_think_tokens(self) -> None:
        ids = self.tokenizer("<think>\n\n</think>", add_special_tokens=False)["input_ids"]
        think_ids = self.tokenizer.convert_tokens_to_ids(["<think>", "</think>"])
        if ids[0] != think_ids[0] or ids[-1] != think_ids[1]:
            raise ChatTemplateError(f"{self.source}: <think> and </think> are not single tokens of this tokenizer")

    def render(self, messages: Sequence[Mapping]) -> str:
        """The chat text of a prompt, ending with the generation prompt."""
        text = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True,
                                                  enable_thinking=self.enable_thinking)
        if not self.enable_thinking and not text.endswith(EMPTY_THINK_BLOCK):
            raise ChatTemplateError(
                f"{self.source}: the chat template rendered a non-thinking prompt ending in {text[-60:]!r}, "
                f"not in the empty think block {EMPTY_THINK_BLOCK!r}; use the model's Qwen3.5/Qwen3 template")
        return text

    def encode(self, messages: Sequence[Mapping]) -> list[int]:
        """Token ids of the rendered prompt (no extra special tokens)."""
        return list(self.tokenizer(self.render(messages), add_special_tokens=False)["input_ids"])

    def encode_row(self, row: Mapping) -> list[int]:
        return self.encode(row_messages(row))


def model_vocab_size(model_dir: str | os.PathLike) -> int:
    """``vocab_size`` from a model folder's ``config.json`` (``text_config`` for multimodal checkpoints)."""
    path = Path(model_dir) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read the model config: {exc}") from None
    size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"{path}: no integer 'vocab_size' (nor 'text_config.vocab_size')")
    return size


def check_vocab(tokenizer, model_vocab: int, *, where: str = "model") -> None:
    """Refuse a tokenizer whose ids do not all have a row in the model's embedding/output layer.

    The model may be larger (Qwen3.5 pads 248,077 tokens to 248,320 rows), never smaller.
    """
    largest = max(tokenizer.get_vocab().values())
    special = {name: getattr(tokenizer, f"{name}_token_id") for name in ("eos", "pad")}
    if largest >= model_vocab:
        raise ValueError(f"{where}: the tokenizer has token id {largest} ({len(tokenizer)} tokens) but the model "
                         f"vocab_size is {model_vocab}; use the model's own tokenizer")
    if special["eos"] is None:
        raise ValueError(f"{where}: the tokenizer defines no eos token")
    if any(v is not None and v >= model_vocab for v in special.values()):
        raise ValueError(f"{where}: special token ids {special} do not fit vocab_size {model_vocab}")


@dataclass(slots=True)
class LengthFilterReport:
    """What the prompt-length filter kept and dropped."""

    max_prompt_tokens: int
    kept: int = 0
    dropped: list[tuple[int, int]] = field(default_factory=list)
    """``(row index, prompt length)`` of every dropped prompt."""
    dropped_by_domain: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        if not self.dropped:
            return f"prompt-length filter: kept all {self.kept} prompts (<= {self.max_prompt_tokens} tokens)"
        by_domain = ", ".join(f"{d} {n}" for d, n in sorted(self.dropped_by_domain.items()))
        longest = max(length for _, length in self.dropped)
        return (f"prompt-length filter: dropped {len(self.dropped)} of {self.kept + len(self.dropped)} prompts "
                f"longer than {self.max_prompt_tokens} tokens ({by_domain}; longest {longest})")


def filter_by_prompt_length(prompt_ids: Sequence[Sequence[int]], max_prompt_tokens: int,
                            domains: Sequence[str] | None = None) -> tuple[list[int], LengthFilterReport]:
    """Indices of the prompts with at most ``max_prompt_tokens`` tokens, and a report of the rest."""
    if max_prompt_tokens < 1:
        raise ValueError(f"max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
    if domains is not None and len(domains) != len(prompt_ids):
        raise ValueError(f"{len(domains)} domains given for {len(prompt_ids)} prompts")
    report = LengthFilterReport(max_prompt_tokens)
    kept = []
    for index, ids in enumerate(prompt_ids):
        if len(ids) <= max_prompt_tokens:
            kept.append(index)
        else:
            report.dropped.append((index, len(ids)))
            report.dropped_by_domain[domains[index] if domains is not None else "all"] += 1
    report.kept = len(kept)
    (logger.warning if report.dropped else logger.info)(report.summary())
    return kept, report
