"""Move weights between Hugging Face safetensors and the student's (TP/PP-sharded) megatron chunks.

``load_hf_weights`` fills every parameter of this rank's chunks from an HF folder; ``iter_hf_tensors``
yields every language-model tensor under its HF name, gathered over TP and broadcast over PP, for weight
sync to a rollout engine and for export. All ranks must call ``iter_hf_tensors`` together.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors import safe_open

from dnmopd.student.arch import StudentArch, dtype_name
from dnmopd.student.hf_mapping import hf_language_model_keys, rule_for
from dnmopd.student.parallel import ParallelDims

PASSTHROUGH_PREFIXES = ("model.visual.", "mtp.")
"""HF tensors that are not part of the language model: kept as they are on export."""
_SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


class SafetensorsFolder:
    """Lazy reader of an HF model folder: ``model.safetensors`` or shards listed in the index."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        index = self.path / "model.safetensors.index.json"
        single = self.path / "model.safetensors"
        if index.is_file():
            with open(index) as f:
                self.file_of = {name: self.path / file for name, file in json.load(f)["weight_map"].items()}
        elif single.is_file():
            with safe_open(single, "pt") as f:
                self.file_of = dict.fromkeys(f.keys(), single)
        else:
            raise FileNotFoundError(f"{self.path}: neither model.safetensors nor model.safetensors.index.json")
        self._handles = {}

    def keys(self) -> list[str]:
        return list(self.file_of)

    def _handle(self, name: str):
        if name not in self.file_of:
            raise KeyError(f"{self.path}: tensor {name!r} not found in the checkpoint")
        file = self.file_of[name]
        if file not in self._handles:
            self._handles[file] = safe_open(file, "pt")
        return self._handles[file]

    def get(self, name: str) -> torch.Tensor:
        return self._handle(name).get_tensor(name)

    def dtype(self, name: str) -> torch.dtype:
        code = self._handle(name).get_slice(name).get_dtype()
        return _SAFETENSORS_DTYPES.get(code) or self.get(name).dtype


def check_language_model_keys(arch: StudentArch, folder: SafetensorsFolder) -> None:
    """Fail with the offending names unless the checkpoint holds exactly the expected LM tensors."""
    expected = set(hf_language_model_keys(arch))
    present = {k for k in folder.keys() if not k.startswith(PASSTHROUGH_PREFIXES)}
    if arch.tie_embeddings:
        present.discard("lm_head.weight")  # some writers store the tied head anyway
    missing, unknown = sorted(expected - present), sorted(present - expected)
    if missing or unknown:
        raise ValueError(
            f"{folder.path}: checkpoint does not match config.json: missing {missing[:8]}"
            f"{'...' if len(missing) > 8 else ''}, unexpected {unknown[:8]}{'...' if len(unknown) > 8 else ''}"
        )


@torch.no_grad()
def load_hf_weights(chunks, hf_dir: str | Path, arch: StudentArch, dims: ParallelDims, padded_vocab: int) -> dict:
    """Copy the HF checkpoint in ``hf_dir`` into this rank's chunks; returns ``{hf_name: dtype name}``."""
    folder = SafetensorsFolder(hf_dir)
    check_language_model_keys(arch, folder)
    inexact = []
    for chunk in chunks:
        for name, param in chunk.named_parameters():
            rule, _ = rule_for(arch, chunk, name, padded_vocab)
            tensors = [folder.get(n) for n in rule.hf_names]
            local = rule.to_local(tensors, dims.tp_rank, dims.tp_size)
            if local.shape != param.shape:
                raise ValueError(
                    f"{folder.path}: {list(rule.hf_names)} with shapes {[tuple(t.shape) for t in tensors]} give "
                    f"{tuple(local.shape)} for megatron parameter {name!r} of shape {tuple(param.shape)}"
                )
            param.copy_(local)
            replicated = len(tensors) == 1 and local.shape == tensors[0].shape and local.ndim == 1
            if replicated and not torch.equal(rule.to_hf([local])[0], tensors[0]):
                inexact.append(rule.hf_names[0])
    if inexact:
        warnings.warn(
            f"{len(inexact)} tensors do not round-trip bit-exactly through the megatron layout "
            f"(e.g. {inexact[:3]}): a zero-centred norm stores weight - 1, exact only for weights >= 0.5",
            stacklevel=2,
        )
    return {name: dtype_name(folder.dtype(name)) for name in hf_language_model_keys(arch)}


def _local_entries(chunks, arch: StudentArch, padded_vocab: int) -> dict:
    entries = {}
    for chunk in chunks:
        for name, param in chunk.named_parameters():
            if name == "output_layer.weight" and arch.tie_embeddings:
                continue  # the last stage's copy of the tied embedding
            rule, _ = rule_for(arch, chunk, name, padded_vocab)
            entries[rule.hf_names] = (rule, param)
    return entries


def _broadcast(tensor: torch.Tensor | None, src: int, group) -> torch.Tensor:
    meta = [None if tensor is None else (tuple(tensor.shape), tensor.dtype)]
    dist.broadcast_object_list(meta, src=src, group=group)
    if tensor is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
        tensor = torch.empty(meta[0][0], dtype=meta[0][1], device=device)
    dist.broadcast(tensor, src=src, group=group)
    return tensor


@torch.no_grad()
def iter_hf_tensors(
    chunks,
    arch: StudentArch,
    dims: ParallelDims,
    padded_vocab: int,
    dtypes: dict | None = None,
    causal_lm_names: bool = False,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(hf_name, full tensor)`` for the whole language model, in HF checkpoint order, on every rank.

    Tensors keep the model's dtype unless ``dtypes`` (``{hf_name: dtype name}``) says otherwise. Names are
    the checkpoint's (``model.language_model.*`` for the VL layout) unless ``causal_lm_names``, which gives
    the parameter names of the text-only ``*ForCausalLM`` module (``model.*``) instead.
    """
    entries = _local_entries(chunks, arch, padded_vocab)
    owners = dict.fromkeys(entries, dims.pp_rank)
    if dims.pp_size > 1:
        gathered = [None] * dims.pp_size
        dist.all_gather_object(gathered, list(entries), group=dims.pg.pp)
        owners = {names: rank for rank, names_list in enumerate(gathered) for names in names_list}
    position = {name: i for i, name in enumerate(hf_language_model_keys(arch))}
    for names in sorted(owners, key=lambda n: position[n[0]]):
        owner = owners[names]
        tensors = [None] * len(names)
        if owner == dims.pp_rank:
            rule, param = entries[names]
            shards = [param.detach().contiguous()]
            if dims.tp_size > 1:
                shards = [torch.empty_like(shards[0]) for _ in range(dims.tp_size)]
                dist.all_gather(shards, param.detach().contiguous(), group=dims.pg.tp)
            tensors = rule.to_hf(shards)
        for name, tensor in zip(names, tensors, strict=True):
            if dims.pp_size > 1:
                tensor = _broadcast(tensor, dims.pp_global_rank(owner), dims.pg.pp)
            if dtypes and name in dtypes:
                tensor = tensor.to(getattr(torch, dtypes[name]))
            if causal_lm_names and name.startswith(arch.hf_prefix):
                name = "model." + name[len(arch.hf_prefix) :]
            yield name, tensor
