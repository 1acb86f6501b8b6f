"""Tiny, deterministic Hugging Face checkpoints for the inference tests (built locally, no hub access).

The architecture is the one recorded in the wire fixtures (Qwen3, 2 layers, hidden 256, vocab 1024, tied
embeddings); weights are drawn with a larger init scale so that next-token distributions are peaked
enough for top-k / top-p / temperature to matter.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

VOCAB = 1024
EOS_ID = 2
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer(out_dir: Path) -> Path:
    """Byte-level BPE with exactly VOCAB entries, trained on a fixed corpus (ids 0..2 are the specials)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    corpus = [f"The number {i} plus {i + 1} equals {2 * i + 1}. " for i in range(2000)]
    corpus += ["def add(a, b):\n    return a + b\n", "Question: what is two plus two? Answer: four."] * 200
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE, model_max_length=2048,
    )
    fast.save_pretrained(out_dir)
    assert len(fast) == VOCAB and fast.convert_tokens_to_ids("<|im_end|>") == EOS_ID
    return out_dir


def build_qwen3(out_dir: Path, *, seed: int = 0, tied: bool = True, init_std: float = 0.15) -> Path:
    """A random tiny Qwen3ForCausalLM saved as fp32 safetensors, plus the tokenizer files."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    out_dir.mkdir(parents=True, exist_ok=True)
    config = Qwen3Config(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=2048,
        tie_word_embeddings=tied, rms_norm_eps=1e-6, initializer_range=init_std,
        bos_token_id=None, eos_token_id=EOS_ID, pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).float()
    model.save_pretrained(out_dir)
    _add_legacy_config_keys(out_dir)
    build_tokenizer(out_dir)
    return out_dir


def perturbed_state(model_dir: Path, *, seed: int, scale: float = 0.05) -> dict[str, torch.Tensor]:
    """HF-named full tensors of `model_dir` plus scale * N(0, 1) noise: a "next step" of training."""
    from safetensors.torch import load_file

    generator = torch.Generator().manual_seed(seed)
    state = load_file(str(model_dir / "model.safetensors"))
    return {name: t + scale * torch.randn(t.shape, generator=generator) for name, t in state.items()}


def reference_logprobs(model, token_ids: list[int]) -> torch.Tensor:
    """float64 log p(token_ids[i] | token_ids[:i]) for i >= 1 from one plain, unbatched forward pass."""
    with torch.no_grad():
        logits = model(torch.tensor([token_ids])).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    return logprobs[:-1].gather(1, torch.tensor(token_ids[1:])[:, None]).squeeze(1)


def _add_legacy_config_keys(out_dir: Path) -> None:
    # transformers 5 writes only rope_parameters; vLLM 0.32 (transformers 5.19) and older readers want these
    path = out_dir / "config.json"
    config = json.loads(path.read_text())
    config.setdefault("rope_theta", config.get("rope_parameters", {}).get("rope_theta", 10000.0))
    config.setdefault("torch_dtype", "float32")
    path.write_text(json.dumps(config, indent=1))
