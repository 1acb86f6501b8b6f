"""Chat rendering through the model folder's tokenizer: documented strings, empty think block, vocab, lengths."""

from __future__ import annotations

import json

import pytest
from jinja2 import TemplateError
from transformers import AutoTokenizer

from dnmopd.data.chat import (
    ChatTemplateError,
    PromptTokenizer,
    check_vocab,
    filter_by_prompt_length,
    model_vocab_size,
    row_messages,
)
from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

USER = [{"role": "user", "content": "What is 2+2?"}]
# qwen35.md 6.3, verbatim
NON_THINKING = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("chat")
    return {flavor: build_tiny_tokenizer(root / flavor, flavor=flavor) for flavor in ("qwen3.5", "qwen3")}


def render(folder, messages, **kwargs):
    tok = AutoTokenizer.from_pretrained(folder)
    return tok.apply_chat_template(messages, tokenize=False, **kwargs)


@pytest.mark.parametrize("flavor", ["qwen3.5", "qwen3"])
def test_non_thinking_prompt_is_the_documented_string(folders, flavor):
    assert render(folders[flavor], USER, add_generation_prompt=True, enable_thinking=False) == NON_THINKING
    assert PromptTokenizer.from_pretrained(folders[flavor]).render(USER) == NON_THINKING


def test_thinking_defaults_differ_between_flavors(folders):
    head = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert render(folders["qwen3.5"], USER, add_generation_prompt=True) == head + "<think>\n"
    assert render(folders["qwen3"], USER, add_generation_prompt=True) == head


@pytest.mark.parametrize("flavor", ["qwen3.5", "qwen3"])
def test_completed_non_thinking_turn_extends_the_generation_prompt(folders, flavor):
    text = render(folders[flavor], USER + [{"role": "assistant", "content": "4"}])
    assert text == NON_THINKING + "4<|im_end|>\n"


def test_multi_turn_system_and_trim_rules(folders):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  Hi \n"},
                {"role": "assistant", "content": "<think>\nplan\n</think>\n\nHello"},
                {"role": "user", "content": "Bye"}]
    expected_35 = ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                   "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
                   "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert render(folders["qwen3.5"], messages, add_generation_prompt=True, enable_thinking=False) == expected_35
    qwen3 = render(folders["qwen3"], messages, add_generation_prompt=True, enable_thinking=False)
    assert "<|im_start|>user\n  Hi \n<|im_end|>" in qwen3  # Qwen3 does not trim
    last = render(folders["qwen3.5"], messages[:3])
    assert last.endswith("<|im_start|>assistant\n<think>\nplan\n</think>\n\nHello<|im_end|>\n")


def test_unsupported_conversations_are_refused(folders):
    tok = AutoTokenizer.from_pretrained(folders["qwen3.5"])
    for messages, problem in (([{"role": "tool", "content": "x"}], "unsupported role tool"),
                              ([{"role": "user", "content": ["image"]}], "content must be a string"),
                              ([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}],
                               "system message is only allowed first")):
        with pytest.raises(TemplateError, match=problem):
            tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_encoding_uses_the_tokenizer_without_extra_special_tokens(folders):
    prompts = PromptTokenizer.from_pretrained(folders["qwen3.5"])
    ids = prompts.encode(USER)
    tok = prompts.tokenizer
    assert ids == tok(NON_THINKING, add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids[-7:]) == ["<|im_start|>", "assistant", "Ċ", "<think>", "ĊĊ", "</think>",
                                                   "ĊĊ"]
    assert prompts.encode_row({"prompt": "What is 2+2?"}) == ids  # plain-string prompt = one user message
    assert row_messages({"prompt": [{"content": "x", "role": "user"}]}) == [{"role": "user", "content": "x"}]


def test_template_without_the_empty_think_block_is_refused(folders):
    tok = AutoTokenizer.from_pretrained(folders["qwen3.5"])
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with pytest.raises(ChatTemplateError, match="empty think block"):
        PromptTokenizer(tok, source="drifted").render(USER)
    assert PromptTokenizer(tok, enable_thinking=True).render(USER).endswith("assistant\n")  # no check when thinking
    tok.chat_template = None
    with pytest.raises(ChatTemplateError, match="no chat template"):
        PromptTokenizer(tok)


def test_vocab_check(folders, tmp_path):
    tok = AutoTokenizer.from_pretrained(folders["qwen3.5"])
    check_vocab(tok, 1024)
    check_vocab(tok, 1280)  # padded embeddings are fine
    with pytest.raises(ValueError, match="token id 1023"):
        check_vocab(tok, 1000, where="tiny model")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text(json.dumps({"vocab_size": 248320}))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 1024}}))
    assert model_vocab_size(tmp_path / "a") == 248320 and model_vocab_size(tmp_path / "b") == 1024
    with pytest.raises(ValueError, match="config.json"):
        model_vocab_size(tmp_path)


def test_prompt_length_filter_reports_what_it_dropped(caplog):
    lengths = [3, 9, 5, 12, 5]
    kept, report = filter_by_prompt_length([[0] * n for n in lengths], 5, ["math", "code", "math", "ifeval", "code"])
    assert kept == [0, 2, 4]
    assert report.dropped == [(1, 9), (3, 12)] and dict(report.dropped_by_domain) == {"code": 1, "ifeval": 1}
    assert "dropped 2 of 5 prompts longer than 5 tokens (code 1, ifeval 1; longest 12)" in caplog.text
    kept, report = filter_by_prompt_length([[1, 2]], 5)
    assert kept == [0] and "kept all 1" in report.summary()
    with pytest.raises(ValueError):
        filter_by_prompt_length([[1]], 0)
