"""The student's architecture, read from a Hugging Face ``config.json``.

Supported: Qwen3 dense (``model_type: qwen3``) and Qwen3.5 dense, text-only (``qwen3_5_text``) or the
released vision-language checkpoints (``qwen3_5`` with a ``text_config``; the language model is trained,
the vision tower and MTP head pass through untouched on export). Anything else fails with an error that
names the file and field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

FULL_ATTENTION = "full_attention"
LINEAR_ATTENTION = "linear_attention"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def dtype_from_name(name: str, *, where: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"{where}: unsupported dtype {name!r}; expected one of {sorted(_DTYPES)}") from None


def dtype_name(dtype: torch.dtype) -> str:
    return next(name for name, value in _DTYPES.items() if value == dtype)


@dataclass(frozen=True, slots=True)
class GatedDeltaNetDims:
    """Gated DeltaNet head layout (Qwen3.5 ``linear_*`` fields)."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    @property
    def qk_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def v_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim


@dataclass(frozen=True, slots=True)
class StudentArch:
    """Everything about the language model that the Megatron build and the HF mapping need."""

    family: str  # "qwen3" or "qwen3_5"
    vocab_size: int
    hidden_size: int
    ffn_hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_query_groups: int
    head_dim: int
    norm_eps: float
    rope_theta: float
    rotary_fraction: float
    tie_embeddings: bool
    max_position_embeddings: int
    layer_types: tuple[str, ...]
    attn_output_gate: bool
    zero_centered_norms: bool
    gdn: GatedDeltaNetDims | None
    hf_dtype: torch.dtype
    vision_language: bool  # the checkpoint is the VL layout (keys under model.language_model.)
    hf_config: dict  # the full config.json, written back unchanged on export

    @property
    def hf_prefix(self) -> str:
        """Prefix of the language-model keys in the HF state dict."""
        return "model.language_model." if self.vision_language else "model."

    @property
    def text_config(self) -> dict:
        return self.hf_config["text_config"] if self.vision_language else self.hf_config

    def is_linear(self, layer: int) -> bool:
        return self.layer_types[layer] == LINEAR_ATTENTION

    @classmethod
    def from_hf_dir(cls, path: str | Path) -> StudentArch:
        config_file = Path(path) / "config.json"
        if not config_file.is_file():
            raise FileNotFoundError(f"{config_file}: no config.json in the Hugging Face model folder {path}")
        with open(config_file) as f:
            return cls.from_hf_config(json.load(f), where=str(config_file))

    @classmethod
    def from_hf_config(cls, config: dict, *, where: str = "config.json") -> StudentArch:
        model_type = config.get("model_type")
        if model_type == "qwen3_5":
            if "text_config" not in config:
                raise ValueError(f"{where}: model_type 'qwen3_5' without a 'text_config' section")
            return _parse(config["text_config"], config, f"{where}: text_config", vision_language=True)
        if model_type in ("qwen3", "qwen3_5_text"):
            return _parse(config, config, where, vision_language=False)
        raise ValueError(
            f"{where}: model_type {model_type!r} is not supported; expected 'qwen3', 'qwen3_5_text' or "
            "'qwen3_5' (dense Qwen3 / Qwen3.5; MoE variants are not supported)"
        )


def _require(text: dict, key: str, where: str):
    if key not in text:
        raise ValueError(f"{where}: missing field {key!r}")
    return text[key]


def _rope(text: dict, where: str) -> tuple[float, float]:
    rope = text.get("rope_parameters") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default" or text.get("rope_scaling"):
        raise ValueError(f"{where}: rope_type {rope_type!r} / rope_scaling is not supported (only 'default')")
    theta = rope.get("rope_theta", text.get("rope_theta"))
    if theta is None:
        raise ValueError(f"{where}: missing field 'rope_parameters.rope_theta' (or 'rope_theta')")
    fraction = rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 1.0))
    return float(theta), float(fraction)


def _layer_types(text: dict, family: str, num_layers: int, where: str) -> tuple[str, ...]:
    if family == "qwen3":
        if text.get("use_sliding_window"):
            raise ValueError(f"{where}: use_sliding_window=true is not supported")
        return (FULL_ATTENTION,) * num_layers
    types = text.get("layer_types")
    if types is None:
        interval = int(text.get("full_attention_interval", 4))
        types = [LINEAR_ATTENTION if (i + 1) % interval else FULL_ATTENTION for i in range(num_layers)]
    if len(types) != num_layers or set(types) - {FULL_ATTENTION, LINEAR_ATTENTION}:
        raise ValueError(
            f"{where}: layer_types must list {num_layers} entries of {FULL_ATTENTION!r}/{LINEAR_ATTENTION!r}"
        )
    return tuple(types)


def _gdn(text: dict, where: str) -> GatedDeltaNetDims:
    dims = GatedDeltaNetDims(
        num_key_heads=int(_require(text, "linear_num_key_heads", where)),
        num_value_heads=int(_require(text, "linear_num_value_heads", where)),
        key_head_dim=int(_require(text, "linear_key_head_dim", where)),
        value_head_dim=int(_require(text, "linear_value_head_dim", where)),
        conv_kernel=int(_require(text, "linear_conv_kernel_dim", where)),
    )
    if dims.num_value_heads % dims.num_key_heads:
        raise ValueError(
            f"{where}: linear_num_value_heads ({dims.num_value_heads}) must be a multiple of "
            f"linear_num_key_heads ({dims.num_key_heads})"
        )
    return dims


def _parse(text: dict, full: dict, where: str, *, vision_language: bool) -> StudentArch:
    family = "qwen3" if text.get("model_type") == "qwen3" else "qwen3_5"
    if text.get("num_experts") or text.get("num_local_experts"):
        raise ValueError(f"{where}: mixture-of-experts models are not supported")
    if text.get("attention_bias"):
        raise ValueError(f"{where}: attention_bias=true is not supported (Qwen3/Qwen3.5 have no biases)")
    if text.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{where}: hidden_act {text.get('hidden_act')!r} is not supported (only 'silu')")
    num_layers = int(_require(text, "num_hidden_layers", where))
    heads = int(_require(text, "num_attention_heads", where))
    hidden = int(_require(text, "hidden_size", where))
    theta, fraction = _rope(text, where)
    if family == "qwen3_5" and text.get("attn_output_gate", True) is False:
        raise ValueError(f"{where}: attn_output_gate=false is not a Qwen3.5 layout")
    tie = text.get("tie_word_embeddings", full.get("tie_word_embeddings", False))
    dtype = full.get("dtype") or full.get("torch_dtype") or text.get("dtype") or "float32"
    return StudentArch(
        family=family,
        vocab_size=int(_require(text, "vocab_size", where)),
        hidden_size=hidden,
        ffn_hidden_size=int(_require(text, "intermediate_size", where)),
        num_layers=num_layers,
        num_attention_heads=heads,
        num_query_groups=int(text.get("num_key_value_heads") or heads),
        head_dim=int(text.get("head_dim") or hidden // heads),
        norm_eps=float(text.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rotary_fraction=fraction,
        tie_embeddings=bool(tie),
        max_position_embeddings=int(text.get("max_position_embeddings", 32768)),
        layer_types=_layer_types(text, family, num_layers, where),
        attn_output_gate=family == "qwen3_5",
        zero_centered_norms=family == "qwen3_5",
        gdn=_gdn(text, where) if family == "qwen3_5" else None,
        hf_dtype=dtype_from_name(dtype, where=f"{where}: dtype"),
        vision_language=vision_language,
        hf_config=full,
    )
