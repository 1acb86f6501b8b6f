"""Deterministic tiny random Hugging Face checkpoints of the student architectures.

    path = build_tiny_hf_checkpoint("runs/tiny-student", arch="qwen3_5", vocab_size=512, seed=0)
    AutoModelForCausalLM.from_pretrained(path)   # loads offline

Every tensor (norm scales, GDN decay parameters included) is drawn from a seeded generator so that tests
exercise every weight mapping; the same arguments always give bit-identical files. ``vision_language=True``
writes the released Qwen3.5 layout: a ``Qwen3_5ForConditionalGeneration`` config with ``text_config``, a tiny
vision tower under ``model.visual.*`` and a multi-token-prediction head under ``mtp.*`` (which transformers
does not model; it is added to the safetensors file as the real checkpoints carry it).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from dnmopd.hf.config import engine_config, generation_config
from dnmopd.io import atomic_directory

_MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json")


def _text_config(arch: str, vocab_size: int, tie: bool, layers: int, overrides: dict) -> dict:
    common = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        rms_norm_eps=1e-6,
        max_position_embeddings=4096,
        tie_word_embeddings=tie,
    )
    if arch == "qwen3":
        common["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000000.0}
    elif arch == "qwen3_5":
        common.update(
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_conv_kernel_dim=4,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000000.0,
                "partial_rotary_factor": 0.25,
                "mrope_interleaved": True,
                "mrope_section": [2, 1, 1],
            },
        )
    else:
        raise ValueError(f"build_tiny_hf_checkpoint: arch must be 'qwen3' or 'qwen3_5', got {arch!r}")
    common.update(overrides)
    return common


def _new_model(arch: str, text: dict, vision_language: bool):
    import transformers

    if arch == "qwen3":
        if vision_language:
            raise ValueError("build_tiny_hf_checkpoint: vision_language=True needs arch='qwen3_5'")
        return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**text))
    if not vision_language:
        return transformers.Qwen3_5ForCausalLM(transformers.Qwen3_5TextConfig(**text))
    vision = dict(
        depth=1,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        out_hidden_size=text["hidden_size"],
        patch_size=4,
        temporal_patch_size=2,
        spatial_merge_size=2,
        num_position_embeddings=16,
    )
    config = transformers.Qwen3_5Config(
        text_config=text, vision_config=vision, tie_word_embeddings=text["tie_word_embeddings"]
    )
    return transformers.Qwen3_5ForConditionalGeneration(config)


def _random_value(name: str, shape: torch.Size, zero_centered: bool, gen: torch.Generator) -> torch.Tensor:
    """Values that keep a tiny model numerically tame while making every tensor distinct."""
    noise = torch.randn(shape, generator=gen)
    if name.endswith("A_log"):
        return torch.empty(shape).uniform_(1.0, 16.0, generator=gen).log()
    if name.endswith("dt_bias"):
        return 1.0 + 0.2 * noise
    if name.endswith("linear_attn.norm.weight"):  # plain-weight GDN output norm
        return 1.0 + 0.1 * noise
    if "norm" in name and len(shape) == 1:
        return (0.0 if zero_centered else 1.0) + 0.1 * noise
    return 0.08 * noise


def _mtp_tensors(text: dict, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """The 15 tensors of Qwen3.5's dense MTP head (one attention layer), random."""
    h, heads, kv, hd, ffn = (text[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                              "head_dim", "intermediate_size"))
    shapes = {
        "mtp.fc.weight": (h, 2 * h),
        "mtp.pre_fc_norm_embedding.weight": (h,),
        "mtp.pre_fc_norm_hidden.weight": (h,),
        "mtp.norm.weight": (h,),
        "mtp.layers.0.input_layernorm.weight": (h,),
        "mtp.layers.0.post_attention_layernorm.weight": (h,),
        "mtp.layers.0.self_attn.q_proj.weight": (2 * heads * hd, h),
        "mtp.layers.0.self_attn.k_proj.weight": (kv * hd, h),
        "mtp.layers.0.self_attn.v_proj.weight": (kv * hd, h),
        "mtp.layers.0.self_attn.o_proj.weight": (h, heads * hd),
        "mtp.layers.0.self_attn.q_norm.weight": (hd,),
        "mtp.layers.0.self_attn.k_norm.weight": (hd,),
        "mtp.layers.0.mlp.gate_proj.weight": (ffn, h),
        "mtp.layers.0.mlp.up_proj.weight": (ffn, h),
        "mtp.layers.0.mlp.down_proj.weight": (h, ffn),
    }
    return {name: _random_value(name, torch.Size(s), True, gen) for name, s in shapes.items()}


def _token_ids_from_tokenizer(tokenizer_dir: Path, vocab_size: int) -> dict:
    """The config's eos (end of text, as the released Qwen configs) and pad ids from the tokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if len(tokenizer) > vocab_size:
        raise ValueError(
            f"build_tiny_hf_checkpoint: tokenizer {tokenizer_dir} has {len(tokenizer)} tokens, more than "
            f"vocab_size={vocab_size}"
        )
    end_of_text = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    end_of_text = end_of_text if isinstance(end_of_text, int) and end_of_text != tokenizer.unk_token_id else None
    eos = end_of_text if end_of_text is not None else tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end_of_text
    return {"eos_token_id": eos, "pad_token_id": pad}


def build_tiny_hf_checkpoint(
    out_dir: str | Path,
    *,
    arch: str = "qwen3_5",
    vocab_size: int = 512,
    seed: int = 0,
    vision_language: bool = False,
    tie_word_embeddings: bool = False,
    num_layers: int = 4,
    dtype: str = "float32",
    tokenizer_dir: str | Path | None = None,
    overrides: dict | None = None,
) -> Path:
    """Write a tiny random ``arch`` checkpoint ("qwen3" or "qwen3_5") to ``out_dir`` and return its path.

    Qwen3.5 layers follow the released 3:1 pattern (three Gated DeltaNet layers, then full attention).
    ``overrides`` replaces text-config fields (e.g. ``{"hidden_size": 128}``). ``tokenizer_dir`` (optional)
    is an HF tokenizer folder whose files are copied in; its end-of-text/pad ids go into the configs. The
    folder is written atomically (temporary sibling folder, then rename); an existing ``out_dir`` is replaced.
    ``config.json`` carries what engines read besides transformers (``dnmopd.hf.config.engine_config``).
    """
    out_dir = Path(out_dir)
    text = _text_config(arch, vocab_size, tie_word_embeddings, num_layers, dict(overrides or {}))
    if tokenizer_dir:
        text.update(_token_ids_from_tokenizer(Path(tokenizer_dir), vocab_size))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _new_model(arch, text, vision_language)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.state_dict().items()):
            param.copy_(_random_value(name, param.shape, arch == "qwen3_5", gen))
    model = model.to(getattr(torch, dtype))

    with atomic_directory(out_dir) as tmp:
        model.save_pretrained(tmp)
        config = engine_config(json.loads((tmp / "config.json").read_text()))
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        if vision_language:
            weights = tmp / "model.safetensors"
            state = load_file(weights)
            state.update({k: v.to(getattr(torch, dtype)) for k, v in _mtp_tensors(text, gen).items()})
            save_file(state, weights, metadata={"format": "pt"})
        if tokenizer_dir:
            for item in Path(tokenizer_dir).iterdir():
                if item.is_file() and item.name not in _MODEL_FILES and not item.name.endswith(".safetensors"):
                    shutil.copy2(item, tmp / item.name)
            generation = generation_config(config, tokenizer_dir)
            (tmp / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    return out_dir
