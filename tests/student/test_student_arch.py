"""Reading the student architecture from HF config.json files, and the tiny checkpoint builder."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from dnmopd.examples.tiny import build_tiny_hf_checkpoint
from dnmopd.student.arch import FULL_ATTENTION, LINEAR_ATTENTION, StudentArch


def _qwen35_text(**overrides) -> dict:
    config = {
        "model_type": "qwen3_5_text",
        "vocab_size": 248320,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 16,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "full_attention_interval": 4,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
        "tie_word_embeddings": True,
        "dtype": "bfloat16",
    }
    config.update(overrides)
    return config


def test_qwen35_2b_style_text_config():
    arch = StudentArch.from_hf_config(_qwen35_text())
    assert arch.family == "qwen3_5" and arch.zero_centered_norms and arch.attn_output_gate
    assert arch.layer_types == (LINEAR_ATTENTION,) * 3 + (FULL_ATTENTION,) + (LINEAR_ATTENTION,) * 3 + (FULL_ATTENTION,)
    assert arch.rotary_fraction == 0.25 and arch.rope_theta == 1e7 and arch.hf_dtype == torch.bfloat16
    assert arch.gdn.qk_dim == 2048 and arch.gdn.v_dim == 2048 and arch.tie_embeddings
    assert arch.hf_prefix == "model."


def test_vision_language_config_uses_text_config():
    full = {"model_type": "qwen3_5", "text_config": _qwen35_text(tie_word_embeddings=False), "dtype": "bfloat16"}
    arch = StudentArch.from_hf_config(full)
    assert arch.vision_language and arch.hf_prefix == "model.language_model." and not arch.tie_embeddings
    assert arch.hf_config is full and arch.text_config["hidden_size"] == 2048


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"model_type": "llama"}, "model_type 'llama' is not supported"),
        ({"model_type": "qwen3_5"}, "without a 'text_config'"),
        (_qwen35_text(num_experts=8), "mixture-of-experts"),
        (_qwen35_text(linear_num_value_heads=24), "must be a multiple of"),
        (_qwen35_text(layer_types=["full_attention"]), "layer_types must list 8 entries"),
        (_qwen35_text(rope_parameters={"rope_type": "yarn", "rope_theta": 1e7}), "rope_type 'yarn'"),
        ({k: v for k, v in _qwen35_text().items() if k != "hidden_size"}, "missing field 'hidden_size'"),
        (_qwen35_text(dtype="int8"), "unsupported dtype 'int8'"),
    ],
)
def test_bad_configs_name_the_field(config, message):
    with pytest.raises(ValueError, match=message) as error:
        StudentArch.from_hf_config(config, where="some/config.json")
    assert "some/config.json" in str(error.value)


def test_tiny_checkpoint_is_deterministic_and_loads(tmp_path):
    from transformers import AutoModelForCausalLM

    a = build_tiny_hf_checkpoint(tmp_path / "a", arch="qwen3_5", vocab_size=200, seed=7)
    b = build_tiny_hf_checkpoint(tmp_path / "b", arch="qwen3_5", vocab_size=200, seed=7)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert not list(tmp_path.glob(".*tmp*"))  # written atomically, nothing left behind
    model = AutoModelForCausalLM.from_pretrained(a, dtype=torch.float32)
    assert type(model).__name__ == "Qwen3_5ForCausalLM"
    arch = StudentArch.from_hf_dir(a)
    assert arch.num_layers == 4 and arch.layer_types[3] == FULL_ATTENTION and arch.vocab_size == 200


def test_tiny_vision_language_checkpoint_carries_vision_and_mtp(tmp_path):
    from transformers import AutoModelForCausalLM

    path = build_tiny_hf_checkpoint(tmp_path / "vl", arch="qwen3_5", vocab_size=200, seed=1, vision_language=True)
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"] and "text_config" in config
    with safe_open(path / "model.safetensors", "pt") as f:
        keys = list(f.keys())
    assert sum(k.startswith("mtp.") for k in keys) == 15
    assert any(k.startswith("model.visual.") for k in keys)
    assert "model.language_model.layers.0.linear_attn.in_proj_qkv.weight" in keys
    assert type(AutoModelForCausalLM.from_pretrained(path)).__name__ == "Qwen3_5ForCausalLM"


def test_tiny_checkpoint_takes_tokenizer_files_and_ids(tmp_path):
    from student_helpers import build_test_tokenizer
    from transformers import AutoTokenizer, GenerationConfig

    tokenizer_dir = build_test_tokenizer(tmp_path / "tokenizer")
    path = build_tiny_hf_checkpoint(tmp_path / "m", arch="qwen3", vocab_size=300, seed=0, tokenizer_dir=tokenizer_dir)
    tokenizer = AutoTokenizer.from_pretrained(path)
    im_end, end_of_text = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    generation = GenerationConfig.from_pretrained(path)
    assert generation.eos_token_id == [im_end, end_of_text] and generation.pad_token_id == end_of_text
    assert (path / "chat_template.jinja").is_file()
    with pytest.raises(ValueError, match="more than vocab_size=100"):
        build_tiny_hf_checkpoint(tmp_path / "small", arch="qwen3", vocab_size=100, seed=0, tokenizer_dir=tokenizer_dir)


def test_tiny_checkpoint_rejects_unknown_arch(tmp_path):
    with pytest.raises(ValueError, match="arch must be 'qwen3' or 'qwen3_5'"):
        build_tiny_hf_checkpoint(tmp_path / "x", arch="llama", vocab_size=100, seed=0)
