"""The release's metadata rules without a trainer run: Hub ids, card options, engine-ready configs, special
token consistency (errors name the files and fields)."""

from __future__ import annotations

import json

import pytest

from dnmopd.hf.config import engine_config, full_attention_interval, generation_config
from dnmopd.hf.model_card import CardConfig, card_metadata, hub_id_from_path, metrics_tables

LIN, FULL = "linear_attention", "full_attention"


def test_hub_ids_come_only_from_a_hugging_face_cache_path(tmp_path):
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen3.5-4B" / "snapshots" / "0123abcd"
    assert hub_id_from_path(snapshot) == "Qwen/Qwen3.5-4B"
    assert hub_id_from_path(tmp_path / "hub" / "models--gpt2" / "snapshots" / "e7da") == "gpt2"
    assert hub_id_from_path(tmp_path / "models" / "Qwen3.5-4B") is None
    assert hub_id_from_path(None) is None


def test_card_options_refuse_local_paths_and_bad_ids(tmp_path):
    assert CardConfig(base_model="Qwen/Qwen3.5-4B", license="apache-2.0").base_model == "Qwen/Qwen3.5-4B"
    for value in (str(tmp_path), "./runs/student", "org/name/extra", "bad--name"):
        with pytest.raises(ValueError, match="base_model"):
            CardConfig(base_model=value)
    with pytest.raises(ValueError, match="license: 'Apache 2.0'"):
        CardConfig(license="Apache 2.0")


def test_license_and_pipeline_tag_fall_back_to_the_base_models_card(tmp_path):
    from dnmopd.hf.model_card import Export

    base = tmp_path / "hub" / "models--Qwen--Qwen3.5-2B" / "snapshots" / "abc"
    base.mkdir(parents=True)
    (base / "README.md").write_text("---\nlicense: mit\npipeline_tag: image-text-to-text\n---\n# base\n")
    export = Export(architecture="Qwen3_5ForConditionalGeneration", summary="", source="", tensor_dtypes=[],
                    passthrough=True, layout="", max_logit_diff=0.0, base_folder=base)
    run = {"mode": "opd", "method": "dn_mopd", "domains": ["math", "code"]}
    meta = card_metadata(export, CardConfig(), run)
    assert meta["base_model"] == "Qwen/Qwen3.5-2B" and meta["license"] == "mit"
    assert meta["pipeline_tag"] == "image-text-to-text"
    assert meta["tags"] == ["dnmopd", "on-policy-distillation", "dn-mopd", "math", "code"]
    assert card_metadata(export, CardConfig(license="apache-2.0", base_model="me/base"), run)["license"] == "apache-2.0"
    (base / "README.md").write_text("---\n: [broken\n---\n")  # an unreadable base card loses only its fields
    assert card_metadata(export, CardConfig(), run)["license"] is None


def test_metrics_tables_put_each_domain_in_a_column():
    lines = metrics_tables({"kl_full/math": 0.123456, "kl_full/code": 1.5, "dn/math/factor": 2.0, "loss": 0.25},
                           ["math", "code"])
    assert lines[:4] == ["| metric | math | code |", "|---|---|---|", "| kl_full | 0.1235 | 1.5 |",
                         "| dn/factor | 2 |  |"]
    assert "| loss | 0.25 |" in lines


def test_full_attention_interval_is_written_only_when_the_layer_pattern_has_one():
    assert full_attention_interval([LIN, LIN, LIN, FULL] * 2) == 4
    assert full_attention_interval([FULL, FULL]) == 1
    assert full_attention_interval([LIN, FULL, LIN, LIN]) is None
    text = {"model_type": "qwen3_5_text", "layer_types": [LIN, LIN, FULL] * 2, "dtype": "bfloat16"}
    vl = engine_config({"model_type": "qwen3_5", "dtype": "bfloat16", "text_config": text})
    assert vl["text_config"]["full_attention_interval"] == 3 and vl["torch_dtype"] == "bfloat16"
    assert vl["text_config"]["torch_dtype"] == "bfloat16" and "full_attention_interval" not in text  # a copy
    with pytest.raises(ValueError, match=r"models/x/config.json: text_config.full_attention_interval=4 does not"):
        engine_config({"model_type": "qwen3_5", "text_config": {**text, "full_attention_interval": 4}},
                      where="models/x/config.json")
    with pytest.raises(ValueError, match="dtype='float32' but torch_dtype='bfloat16'"):
        engine_config({"model_type": "qwen3", "dtype": "float32", "torch_dtype": "bfloat16"})


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

    return build_tiny_tokenizer(tmp_path_factory.mktemp("tokenizer") / "tok", flavor="qwen3.5", vocab_size=1024)


def test_generation_config_is_derived_from_or_checked_against_config_and_tokenizer(tokenizer, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    end_of_text = tok.convert_tokens_to_ids("<|endoftext|>")
    config = {"model_type": "qwen3_5_text", "eos_token_id": end_of_text, "pad_token_id": tok.pad_token_id}
    assert generation_config(config, tokenizer) == {"eos_token_id": [tok.eos_token_id, end_of_text],
                                                    "pad_token_id": tok.pad_token_id}
    base = tmp_path / "generation_config.json"
    base.write_text(json.dumps({"eos_token_id": [tok.eos_token_id, end_of_text], "pad_token_id": tok.pad_token_id,
                                "top_p": 0.95}))
    assert generation_config(config, tokenizer, base)["top_p"] == 0.95
    base.write_text(json.dumps({"eos_token_id": end_of_text, "pad_token_id": tok.pad_token_id}))
    with pytest.raises(ValueError, match=rf"{tokenizer} eos token \[{tok.eos_token_id}\] is not among the "
                                         rf"eos_token_id \[{end_of_text}\] of {base}"):
        generation_config(config, tokenizer, base)
    with pytest.raises(ValueError, match=r"the pad ids differ: config.json \[7\]"):
        generation_config({**config, "pad_token_id": 7}, tokenizer)
