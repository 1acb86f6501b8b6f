"""The tiny Qwen-style tokenizer: deterministic bytes, loadable offline, Qwen special tokens and ids layout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from dnmopd.examples.tiny_tokenizer import ADDED_TOKENS, build_tiny_tokenizer

FLAVORS = ["qwen3.5", "qwen3"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-tokenizers")
    return {flavor: build_tiny_tokenizer(root / flavor, flavor=flavor) for flavor in FLAVORS}


def folder_bytes(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


@pytest.mark.parametrize("flavor", FLAVORS)
def test_same_bytes_on_every_build_even_in_another_process(built, tmp_path, flavor):
    other = tmp_path / "again"
    code = ("import sys; from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer; "
            "build_tiny_tokenizer(sys.argv[1], flavor=sys.argv[2])")
    subprocess.run([sys.executable, "-c", code, str(other), flavor], check=True)
    assert folder_bytes(other) == folder_bytes(built[flavor])
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} <= set(folder_bytes(other))


@pytest.mark.parametrize("flavor, cls", [("qwen3.5", "Qwen3_5Tokenizer"), ("qwen3", "Qwen2Tokenizer")])
def test_loads_offline_with_qwen_special_tokens(built, flavor, cls):
    tok = AutoTokenizer.from_pretrained(built[flavor])
    assert type(tok).__name__ == cls and len(tok) == 1024
    added = [t for t, _ in ADDED_TOKENS[flavor]]
    assert len(added) == {"qwen3.5": 33, "qwen3": 26}[flavor]
    # as in the real vocabularies, the added tokens follow the BPE ranks, in the documented order
    assert tok.convert_tokens_to_ids(added) == list(range(1024 - len(added), 1024))
    assert (tok.eos_token, tok.pad_token, tok.bos_token) == ("<|im_end|>", "<|endoftext|>", None)
    assert tok.pad_token_id == 1024 - len(added) and tok.eos_token_id == tok.pad_token_id + 2
    think = tok("<think>\n\n</think>", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(think) == ["<think>", "ĊĊ", "</think>"]
    assert "<think>" in tok.decode(think, skip_special_tokens=True)  # not special, as in Qwen
    assert tok.decode(tok("<|im_end|>x")["input_ids"], skip_special_tokens=True) == "x"


@pytest.mark.parametrize("flavor", FLAVORS)
def test_round_trip_of_mixed_text(built, flavor):
    tok = AutoTokenizer.from_pretrained(built[flavor])
    for text in ["Hello, world! 12345", "def f(x):\n    return x**2\n\n", "naïve café — 毕老师 \\boxed{\\frac{1}{2}}",
                 "  spaces\tand\ttabs  ", "<|im_start|>user\nhi<|im_end|>\n"]:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text
    assert tok("2025", add_special_tokens=False)["input_ids"] == [tok.convert_tokens_to_ids(d) for d in "2025"]


def test_generation_suffix_has_the_real_token_structure(built):
    # Real Qwen3.5: <|im_start|>assistant\n<think>\n\n</think>\n\n = [248045, 74455, 198, 248068, 271, 248069, 271]
    tok = AutoTokenizer.from_pretrained(built["qwen3.5"])
    ids = tok("<|im_start|>assistant\n<think>\n\n</think>\n\n", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["<|im_start|>", "assistant", "Ċ", "<think>", "ĊĊ", "</think>", "ĊĊ"]


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="flavor"):
        build_tiny_tokenizer(tmp_path / "x", flavor="llama")
    with pytest.raises(ValueError, match="vocab_size"):
        build_tiny_tokenizer(tmp_path / "x", vocab_size=100)
    assert not (tmp_path / "x").exists()


def test_other_vocab_sizes(tmp_path):
    tok = AutoTokenizer.from_pretrained(build_tiny_tokenizer(tmp_path / "t", vocab_size=2048))
    assert len(tok) == 2048 and tok.convert_tokens_to_ids("<|audio_pad|>") == 2047
