"""Writing HF-named full tensors as a Hugging Face folder that SGLang / vLLM can load from disk.

The folder gets the base model's non-weight files (config, generation config, tokenizer, chat template)
and the tensors as safetensors shards with an index. It is written under a temporary name and renamed
into place, so a server never sees a half-written folder.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

import torch

from dnmopd.io import atomic_directory

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def write_hf_folder(
    named_tensors: Iterable[tuple[str, torch.Tensor]], base_model_path: str | Path, out_dir: str | Path,
    *, max_shard_size: str = "5GB",
) -> Path:
    """Write the tensors and the base model's non-weight files as an HF folder at `out_dir`; returns it."""
    from huggingface_hub import save_torch_state_dict

    base, out_dir = Path(base_model_path), Path(out_dir)
    if not (base / "config.json").is_file():
        raise FileNotFoundError(f"{base}: not a Hugging Face model folder (no config.json)")
    state = {name: tensor.detach().to("cpu").contiguous() for name, tensor in named_tensors}
    if not state:
        raise ValueError("write_hf_folder: no tensors given")
    with atomic_directory(out_dir) as tmp:  # a failed write leaves nothing behind
        for item in base.iterdir():
            if item.is_file() and not item.name.endswith(WEIGHT_SUFFIXES) and not item.name.endswith(".index.json"):
                shutil.copy2(item, tmp / item.name)
        save_torch_state_dict(state, tmp, max_shard_size=max_shard_size)
    return out_dir


def check_weights_folder(path: str | Path) -> Path:
    """A folder with config.json and safetensors weights, or a clear error (vLLM dies on a bad path)."""
    path = Path(path)
    if not (path / "config.json").is_file() or not any(path.glob("*.safetensors")):
        raise FileNotFoundError(f"{path}: not a model folder with config.json and *.safetensors weights")
    return path.resolve()
