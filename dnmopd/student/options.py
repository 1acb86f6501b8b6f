"""The student's build options and its config section (`student:`), importable without megatron-core (a config
is checked, e.g. by `--print-config`, before anything heavy is loaded)."""

from __future__ import annotations

from dataclasses import dataclass

from dnmopd.student.gated_delta_rule import BACKENDS


@dataclass(kw_only=True, slots=True)
class BuildOptions:
    """How to build the student (the architecture itself comes from the HF config)."""

    dtype: str = "auto"
    """Parameter dtype: "auto" (the checkpoint's dtype), "float32", "bfloat16" or "float16"."""
    transformer_impl: str = "auto"
    """"auto" (Transformer Engine when importable and CUDA is available), "local" or "transformer_engine"."""
    gdn_backend: str = "auto"
    """Gated delta rule: "auto" (FLA on CUDA when usable, else torch), "fla" or "torch"."""
    gdn_chunk_size: int = 64
    """Chunk length of the pure-torch chunked gated delta rule."""
    activation_recompute: bool = False
    """Recompute each layer's activations in the backward pass (megatron full/uniform recompute)."""
    make_vocab_size_divisible_by: int = 128
    """Pad the vocabulary to a multiple of this times the TP size (megatron's rule)."""

    def __post_init__(self):
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"BuildOptions.dtype must be auto/float32/bfloat16/float16, got {self.dtype!r}")
        if self.transformer_impl not in ("auto", "local", "transformer_engine"):
            raise ValueError(
                f"BuildOptions.transformer_impl must be auto/local/transformer_engine, got {self.transformer_impl!r}"
            )
        if self.gdn_backend not in BACKENDS:
            raise ValueError(f"BuildOptions.gdn_backend must be one of {BACKENDS}, got {self.gdn_backend!r}")
        if self.gdn_chunk_size < 1 or self.make_vocab_size_divisible_by < 1:
            raise ValueError("BuildOptions.gdn_chunk_size and make_vocab_size_divisible_by must be >= 1")


@dataclass(kw_only=True, slots=True)
class StudentConfig(BuildOptions):
    hf_path: str
    """Hugging Face model folder (config.json + safetensors; text-only or the Qwen3.5 VL layout)."""
