"""Hugging Face config files that every engine reads the same way: transformers, vLLM and SGLang.

``engine_config`` completes a ``config.json`` with what transformers drops on save but engines read:
``full_attention_interval`` of a Qwen3.5 layer pattern (SGLang builds its layers from it) and ``torch_dtype``
beside ``dtype`` (older readers know only ``torch_dtype``). ``generation_config`` checks (or, without a base
file, derives) the end-of-sequence and padding ids so that ``config.json``, ``generation_config.json`` and the
tokenizer agree: every eos id of the config and the tokenizer's eos token stop generation, and the pad ids
are one id.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from dnmopd.student.arch import FULL_ATTENTION, LINEAR_ATTENTION


def full_attention_interval(layer_types: list[str]) -> int | None:
    """k when every k-th layer (and only those) is full attention, else None (the pattern has no interval)."""
    full = [i for i, kind in enumerate(layer_types) if kind == FULL_ATTENTION]
    if not full or set(layer_types) - {FULL_ATTENTION, LINEAR_ATTENTION}:
        return None
    k = full[0] + 1
    pattern = [FULL_ATTENTION if (i + 1) % k == 0 else LINEAR_ATTENTION for i in range(len(layer_types))]
    return k if pattern == list(layer_types) else None


def _sections(config: dict) -> list[dict]:
    """The config and its text_config (Qwen3.5 VL layout), where the language-model fields live."""
    return [config, *([config["text_config"]] if isinstance(config.get("text_config"), dict) else [])]


def engine_config(config: dict, *, where: str = "config.json") -> dict:
    """A copy of ``config`` with ``full_attention_interval`` and ``torch_dtype`` filled in (errors name ``where``)."""
    config = copy.deepcopy(config)
    for section in _sections(config):
        prefix = "text_config." if section is not config else ""
        if section.get("model_type") == "qwen3_5_text" and "layer_types" in section:
            interval = full_attention_interval(section["layer_types"])
            given = section.get("full_attention_interval")
            if given is not None and given != interval:
                raise ValueError(f"{where}: {prefix}full_attention_interval={given} does not match "
                                 f"{prefix}layer_types {section['layer_types']}")
            if interval is not None:
                section["full_attention_interval"] = interval
        dtype, torch_dtype = section.get("dtype"), section.get("torch_dtype")
        if dtype and torch_dtype and dtype != torch_dtype:
            raise ValueError(f"{where}: {prefix}dtype={dtype!r} but {prefix}torch_dtype={torch_dtype!r}")
        if dtype or torch_dtype:
            section["dtype"] = section["torch_dtype"] = dtype or torch_dtype
    return config


def _ids(value) -> list[int]:
    return [] if value is None else [value] if isinstance(value, int) else list(value)


def _config_ids(config: dict, key: str) -> list[int]:
    return list(dict.fromkeys(i for section in _sections(config) for i in _ids(section.get(key))))


def _tokenizer_ids(tokenizer_dir: Path) -> tuple[list[int], list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    return _ids(tokenizer.eos_token_id), _ids(tokenizer.pad_token_id)


def generation_config(config: dict, tokenizer_dir: str | Path, base_file: str | Path | None = None) -> dict:
    """The generation config of a model folder: ``base_file`` (the base model's) checked against ``config`` and
    the tokenizer in ``tokenizer_dir``, or, without one, derived from them. Raises ValueError naming the files
    when the eos or pad ids disagree."""
    config_eos, config_pad = _config_ids(config, "eos_token_id"), _config_ids(config, "pad_token_id")
    tokenizer_eos, tokenizer_pad = _tokenizer_ids(Path(tokenizer_dir))
    if base_file is None:
        eos = list(dict.fromkeys(tokenizer_eos + config_eos))
        pad = (tokenizer_pad or config_pad)[:1]
        generation = {}
        if eos:
            generation["eos_token_id"] = eos[0] if len(eos) == 1 else eos
        if pad:
            generation["pad_token_id"] = pad[0]
        source = "the derived generation config"
    else:
        generation = json.loads(Path(base_file).read_text())
        source = str(base_file)
    stops = _ids(generation.get("eos_token_id"))
    eos_sources = {"config.json eos_token_id": config_eos, f"{tokenizer_dir} eos token": tokenizer_eos}
    problems = [f"{name} {ids} is not among the eos_token_id {stops} of {source}"
                for name, ids in eos_sources.items() if stops and set(ids) - set(stops)]
    pads = {"config.json": config_pad, source: _ids(generation.get("pad_token_id")), str(tokenizer_dir): tokenizer_pad}
    if len({i for ids in pads.values() for i in ids}) > 1:
        problems.append("the pad ids differ: " + ", ".join(f"{name} {ids}" for name, ids in pads.items() if ids))
    if problems:
        raise ValueError("inconsistent special tokens: " + "; ".join(problems))
    return generation
