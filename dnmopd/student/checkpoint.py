"""The student's training checkpoint: a megatron-core distributed checkpoint plus ``student.json``.

The distributed checkpoint (``torch_dist`` format) stores every parameter by its global name and TP layout,
so it loads at any TP/PP/VPP size; ``student.json`` records what is needed to rebuild the model and export it
(the HF ``config.json``, the padded vocabulary, the source dtype of every HF tensor, the base HF folder
whose vision/MTP tensors and tokenizer a release reuses). Writes are atomic: ranks save into
``<dir>.tmp``, rank 0 adds ``student.json`` last and renames the folder.

Callers may add their own sharded state (e.g. the optimizer's) under ``extra`` keys of the same checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch.distributed as dist

METADATA_FILE = "student.json"
FORMAT = "dnmopd-student/1"


def chunk_keys(num_chunks: int) -> list[str]:
    """megatron's convention: ``model`` for one chunk, ``model0``, ``model1``, ... with virtual pipelining."""
    return ["model"] if num_chunks == 1 else [f"model{i}" for i in range(num_chunks)]


def read_metadata(directory: str | Path) -> dict:
    path = Path(directory) / METADATA_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not a student checkpoint (no {METADATA_FILE}; incomplete or wrong folder?)")
    with open(path) as f:
        meta = json.load(f)
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: format {meta.get('format')!r} is not {FORMAT!r}")
    return meta


def model_sharded_state_dict(chunks) -> dict:
    """The chunks' sharded state under megatron's keys (pass it to the optimizer's ``sharded_state_dict``)."""
    return {key: chunk.sharded_state_dict() for key, chunk in zip(chunk_keys(len(chunks)), chunks, strict=True)}


def save_checkpoint(
    chunks, directory: str | Path, metadata: dict, extra: dict | None = None, model_state: dict | None = None
) -> Path:
    """Save this rank's chunks (and ``extra`` sharded state) into ``directory``; all ranks must call it.

    ``model_state`` is the result of :func:`model_sharded_state_dict` when the caller already built it (for
    an optimizer state that refers to it).
    """
    from megatron.core import dist_checkpointing

    directory = Path(directory)
    tmp = directory.with_name(directory.name + ".tmp")
    rank = dist.get_rank()
    if rank == 0:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    dist.barrier()
    state = dict(model_state or model_sharded_state_dict(chunks))
    state.update(extra or {})
    dist_checkpointing.save(state, str(tmp))
    dist.barrier()
    if rank == 0:
        with open(tmp / METADATA_FILE, "w") as f:
            json.dump({"format": FORMAT, **metadata}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        if directory.exists():
            shutil.rmtree(directory)
        tmp.rename(directory)
    dist.barrier()
    return directory


def load_checkpoint(
    chunks, directory: str | Path, extra: dict | None = None, model_state: dict | None = None
) -> dict:
    """Load parameters into this rank's chunks; returns the loaded ``extra`` state (all ranks must call it)."""
    from megatron.core import dist_checkpointing

    read_metadata(directory)
    keys = chunk_keys(len(chunks))
    request = dict(model_state or model_sharded_state_dict(chunks))
    request.update(extra or {})
    loaded = dist_checkpointing.load(request, str(directory))
    for key, chunk in zip(keys, chunks, strict=True):
        chunk.load_state_dict(loaded.pop(key))
    return loaded
