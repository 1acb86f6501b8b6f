"""The session fixture of the student tests: tiny HF checkpoints built once."""

from __future__ import annotations

import pytest
from student_helpers import VOCAB

from dnmopd.examples.tiny import build_tiny_hf_checkpoint


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, str]:
    """Tiny random HF checkpoints: untied Qwen3.5, tied Qwen3.5 VL (+ vision/MTP), tied Qwen3, and 1-KV-head
    variants (fewer query groups than TP ranks at TP=2: megatron's all-gather path)."""
    root = tmp_path_factory.mktemp("student_tiny")
    return {
        "qwen3_5": str(build_tiny_hf_checkpoint(root / "qwen3_5", arch="qwen3_5", vocab_size=VOCAB, seed=1)),
        "qwen3_5_vl": str(
            build_tiny_hf_checkpoint(
                root / "qwen3_5_vl", arch="qwen3_5", vocab_size=VOCAB, seed=2, vision_language=True,
                tie_word_embeddings=True,
            )
        ),
        # one KV head at TP=2: megatron's all-gather path for fewer query groups than TP ranks
        "qwen3_5_kv1": str(
            build_tiny_hf_checkpoint(
                root / "qwen3_5_kv1", arch="qwen3_5", vocab_size=VOCAB, seed=4, overrides={"num_key_value_heads": 1}
            )
        ),
        "qwen3_kv1": str(
            build_tiny_hf_checkpoint(
                root / "qwen3_kv1", arch="qwen3", vocab_size=VOCAB, seed=5, num_layers=2,
                overrides={"num_key_value_heads": 1},
            )
        ),
        "qwen3": str(
            build_tiny_hf_checkpoint(
                root / "qwen3", arch="qwen3", vocab_size=VOCAB, seed=3, tie_word_embeddings=True, num_layers=2
            )
        ),
    }
