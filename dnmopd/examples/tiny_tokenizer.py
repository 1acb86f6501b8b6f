"""A tiny, deterministic Qwen-style tokenizer for tiny test models and the CPU demo.

``build_tiny_tokenizer(out_dir, flavor="qwen3.5")`` trains a byte-level BPE (the ``tokenizers`` library) on
a fixed built-in corpus (IF prompts from our generator, arithmetic, code, chat words, pseudo-words), with the
real tokenizer's pipeline (NFC, the flavor's split regex, byte-level), adds the flavor's special tokens after
the BPE ranks (as in the real vocabulary), and saves a folder that ``transformers.AutoTokenizer`` loads
offline: ``eos = <|im_end|>``, ``pad = <|endoftext|>``, no BOS, our chat template (``chat_templates``).
The same arguments always give the same bytes. It takes about a second.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from dnmopd.data.chat_templates import CHAT_TEMPLATES
from dnmopd.io import atomic_directory

FLAVORS = ("qwen3.5", "qwen3")

_QWEN3_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                  "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                  "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")
_QWEN3_PLAIN = ("<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>")
_QWEN35_EXTRA = ("<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
                 "<tts_text_bos_single>", "<|audio_pad|>")

ADDED_TOKENS = {
    "qwen3": [(t, True) for t in _QWEN3_SPECIAL] + [(t, False) for t in _QWEN3_PLAIN],
    "qwen3.5": [(t, True) for t in _QWEN3_SPECIAL] + [(t, False) for t in _QWEN3_PLAIN]
    + [(t, True) for t in _QWEN35_EXTRA],
}
"""Added tokens in id order (token, special?), as in the real vocabularies (ids after the BPE ranks)."""

SPLIT_REGEX = {
    "qwen3.5": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",  # noqa: E501
    "qwen3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",  # noqa: E501
}
TOKENIZER_CLASS = {"qwen3.5": "Qwen3_5Tokenizer", "qwen3": "Qwen2Tokenizer"}

_CODE = (
    "def solve():\n    n = int(input())\n    print(n * 2)\n\nif __name__ == '__main__':\n    solve()\n",
    "import sys\nfor line in sys.stdin:\n    a, b = map(int, line.split())\n    print(a + b)\n",
    "class Solution:\n    def isAnagram(self, s: str, t: str) -> bool:\n        return sorted(s) == sorted(t)\n",
    "```python\nnums = list(map(int, input().split()))\nprint(max(nums), min(nums), sum(nums))\n```\n",
)
_SYLLABLES = ("ka", "lo", "mi", "ter", "an", "del", "ri", "son", "be", "qu", "ex", "tion", "ing", "ph", "gr", "st")


def _corpus() -> list[str]:
    """The fixed training text: deterministic, a few hundred KB."""
    from dnmopd.data.ifeval_generator import generate

    rng = random.Random(1234)
    texts = [p.prompt for p in generate(300, seed=11)]
    texts += [f"The number {i} plus {i + 7} equals {2 * i + 7}. So the answer is \\boxed{{{2 * i + 7}}}."
              for i in range(400)]
    texts += [f"Compute $\\frac{{{i}}}{{{i + 3}}} + \\sqrt{{{i * 2}}}$ and x^{i % 9} - {i}y = 0." for i in range(200)]
    texts += list(_CODE) * 50
    texts += ["user assistant system think answer reasoning step final math code ifeval teacher student"] * 50
    texts += ["system\nuser\nassistant\n"] * 200  # role names as they follow <|im_start|>
    texts += [" ".join("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(12))
              for _ in range(1500)]
    rng.shuffle(texts)
    return ["\n\n".join(texts[i:i + 4]) for i in range(0, len(texts), 4)]  # paragraphs, as in chat turns


def _train(flavor: str, vocab_size: int):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_REGEX[flavor]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    bpe_size = vocab_size - len(ADDED_TOKENS[flavor])
    trainer = trainers.BpeTrainer(vocab_size=bpe_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(_corpus(), trainer)
    if tokenizer.get_vocab_size() != bpe_size:
        raise RuntimeError(f"tiny tokenizer: the corpus gave {tokenizer.get_vocab_size()} BPE tokens, "
                           f"{bpe_size} requested; use a smaller vocab_size")
    return tokenizer


def build_tiny_tokenizer(out_dir: str | os.PathLike, *, flavor: str = "qwen3.5", vocab_size: int = 1024) -> Path:
    """Write a tiny ``flavor`` tokenizer with ``vocab_size`` tokens (BPE + specials) to ``out_dir``.

    The folder is replaced atomically; returns its path. ``vocab_size`` counts every token, so a tiny model
    needs an embedding of at least that many rows.
    """
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    if flavor not in FLAVORS:
        raise ValueError(f"unknown tokenizer flavor {flavor!r}; choose one of {', '.join(FLAVORS)}")
    minimum = 256 + len(ADDED_TOKENS[flavor]) + 64
    if not minimum <= vocab_size <= 4096:
        raise ValueError(f"vocab_size must be in [{minimum}, 4096] for a tiny tokenizer, got {vocab_size}")
    backend = _train(flavor, vocab_size)
    backend.add_tokens([AddedToken(tok, special=special, normalized=False) for tok, special in ADDED_TOKENS[flavor]])
    fast = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token=None, bos_token=None, chat_template=CHAT_TEMPLATES[flavor],
                                   model_max_length=32768, clean_up_tokenization_spaces=False)
    out = Path(out_dir)
    with atomic_directory(out) as staging:
        fast.save_pretrained(staging)
        _set_tokenizer_class(staging / "tokenizer_config.json", TOKENIZER_CLASS[flavor])
    return out


def _set_tokenizer_class(config_path: Path, name: str) -> None:
    import json

    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = name
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
