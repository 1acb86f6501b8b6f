"""Fixtures of the inference tests: tiny checkpoints (built once per session) and the reference forward."""

from __future__ import annotations

import pytest
import torch
from tiny_checkpoints import build_qwen3


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return build_qwen3(tmp_path_factory.mktemp("tiny-qwen3"), seed=0, tied=True)


@pytest.fixture(scope="session")
def tiny_hf_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
