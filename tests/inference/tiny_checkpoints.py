"""Tiny, deterministic Hugging Face checkpoints for the inference tests (built locally, no hub access).

The project's own builders make them: the architecture recorded in the wire fixtures (Qwen3, 2 layers,
vocab 1024, tied embeddings, like Qwen3.5 2B/4B) with the tiny Qwen3 tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import torch

VOCAB = 1024


def build_qwen3(out_dir: Path, *, seed: int = 0, tied: bool = True) -> Path:
    """A random tiny Qwen3ForCausalLM in fp32 safetensors with tokenizer files."""
    from dnmopd.examples.tiny import build_tiny_hf_checkpoint
    from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(out_dir.parent / f"{out_dir.name}-tokenizer", flavor="qwen3", vocab_size=VOCAB)
    return build_tiny_hf_checkpoint(out_dir, arch="qwen3", vocab_size=VOCAB, seed=seed, num_layers=2,
                                    tie_word_embeddings=tied, tokenizer_dir=tokenizer)


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
