"""Helpers shared by the student tests and gpu_check.py (no pytest import: the GPU image may lack it)."""

from __future__ import annotations

import torch

VOCAB = 300  # not a multiple of 128: exercises vocabulary padding


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


CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_test_tokenizer(out_dir) -> str:
    """A small byte-level BPE tokenizer (< VOCAB tokens) with Qwen's chat special tokens and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - 20, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(["what is two plus two? four. hello world, the student answers."] * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE
    )
    fast.save_pretrained(out_dir)
    return str(out_dir)
