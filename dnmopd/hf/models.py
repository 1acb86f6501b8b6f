"""Hugging Face models as the inference backends and the trainer see them (rollout and teachers alike): loading a
causal LM for the in-process backends, a teacher's LM head alone (full-vocabulary targets), vocabulary sizes, and
whether a server serves the expected model folder."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from dnmopd.student.weights import SafetensorsFolder

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
OUTPUT_WEIGHT_NAMES = ("lm_head.weight", "model.embed_tokens.weight", "model.language_model.embed_tokens.weight")
"""Where a causal LM's output weight lies, in order: its LM head, else its (tied) input embedding."""


def load_causal_lm(model_path: str, *, device: str, dtype: str, attn_implementation: str) -> torch.nn.Module:
    """Load `model_path` with transformers in eval mode on `device`; errors name the folder."""
    from transformers import AutoModelForCausalLM

    if not (Path(model_path) / "config.json").is_file():
        raise FileNotFoundError(f"{model_path}: not a Hugging Face model folder (no config.json)")
    model = AutoModelForCausalLM.from_pretrained(
        model_path, dtype=DTYPES[dtype], attn_implementation=attn_implementation
    )
    return model.to(device).eval()


def teacher_output_weight(model_path: str) -> torch.Tensor:
    """A Hugging Face teacher's LM-head weight [vocab, hidden] (its input embedding when tied), read alone."""
    folder = SafetensorsFolder(model_path)
    name = next((n for n in OUTPUT_WEIGHT_NAMES if n in folder.file_of), None)
    if name is None:
        raise ValueError(f"{model_path}: no LM head among {OUTPUT_WEIGHT_NAMES}")
    return folder.get(name)


def model_vocab_size(model: torch.nn.Module) -> int:
    """Rows of the LM head: the ids the model can score (config vocab, padding rows included)."""
    return int(model.get_output_embeddings().weight.shape[0])


def config_vocab_size(model_path: str) -> int | None:
    """`vocab_size` from a local HF folder's config.json (text_config for multimodal), None if absent."""
    path = Path(model_path) / "config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except ValueError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    return int(size) if size else None


def resolve_vocab_size(config: Any) -> int:
    """`config.vocab_size`, or the one in `config.model_path`/config.json; errors name the fix."""
    if config.vocab_size:
        return int(config.vocab_size)
    size = config_vocab_size(config.model_path)
    if size is None:
        raise ValueError(
            f"{type(config).__qualname__}.vocab_size: {config.model_path}/config.json is not readable here; "
            "set vocab_size explicitly (ids are validated against it before they are sent)"
        )
    return size


def same_model_path(served: Any, expected: str) -> bool:
    if not isinstance(served, str):
        return False
    return served == expected or os.path.realpath(served) == os.path.realpath(expected)
