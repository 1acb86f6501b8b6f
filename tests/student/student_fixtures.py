"""Shared fixtures and helpers of the student tests (tiny HF checkpoints built once per session)."""

from __future__ import annotations

import pytest
import torch

from dnmopd.student.tiny import build_tiny_hf_checkpoint

VOCAB = 300  # not a multiple of 128: exercises vocabulary padding


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, str]:
    """Paths of tiny random HF checkpoints: untied Qwen3.5, tied Qwen3.5 VL (+ vision/MTP), tied Qwen3."""
    root = tmp_path_factory.mktemp("student_tiny")
    return {
        "qwen3_5": str(build_tiny_hf_checkpoint(root / "qwen3_5", arch="qwen3_5", vocab_size=VOCAB, seed=1)),
        "qwen3_5_vl": str(
            build_tiny_hf_checkpoint(
                root / "qwen3_5_vl", arch="qwen3_5", vocab_size=VOCAB, seed=2, vision_language=True,
                tie_word_embeddings=True,
            )
        ),
        "qwen3": str(
            build_tiny_hf_checkpoint(
                root / "qwen3", arch="qwen3", vocab_size=VOCAB, seed=3, tie_word_embeddings=True, num_layers=2
            )
        ),
    }


def probe_ids(batch: int = 2, length: int = 70, seed: int = 0) -> torch.Tensor:
    """Deterministic token ids; 70 tokens span two 64-token GDN chunks."""
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def hf_logits(path: str, ids: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad():
        return model(ids).logits


def hf_state(path: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(f"{path}/model.safetensors")


def roundtrip_mismatches(student, path: str) -> list[str]:
    """Names whose exported tensor is not bit-identical (values and dtype) to the source checkpoint."""
    source = hf_state(path)
    seen, bad = set(), []
    for name, tensor in student.hf_tensors(source_dtypes=True):
        seen.add(name)
        if tensor.dtype != source[name].dtype or not torch.equal(tensor.cpu(), source[name]):
            bad.append(name)
    lm_keys = {k for k in source if not k.startswith(("model.visual.", "mtp."))}
    bad.extend(sorted(lm_keys - seen))
    return bad
