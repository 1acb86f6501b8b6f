"""Resumable run checkpoints: <run_dir>/checkpoints/iter_<update:07d>/

    model/               megatron-core distributed checkpoint of the student and the optimizer (any TP/PP)
    trainer_state.json   update counter, sampler position, method state (frozen multipliers), LR schedule, ...
    rng/rank_<r>.pt      every rank's python / numpy / torch / CUDA RNG states
    local/rank_<r>.pt    every rank's own trainer state (the batch collected ahead, train.rollout_ahead 1)
    complete             written last by rank 0: a checkpoint without it is ignored (and removed)

A checkpoint is complete only when its marker exists, so a run killed while saving resumes from the previous
one; the newest complete checkpoints are kept (`keep_last`).
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from dnmopd.data.io import atomic_write

MARKER = "complete"
PATTERN = re.compile(r"^iter_(\d{7})$")


def checkpoint_dir(run_dir: Path, update: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"iter_{update:07d}"


def complete_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = PATTERN.match(path.name)
        if match and (path / MARKER).is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = complete_checkpoints(run_dir)
    return found[-1][1] if found else None


def _rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _write_json(path: Path, value: dict) -> None:
    with atomic_write(path) as f:
        json.dump(value, f, indent=1)


def save(run_dir: Path, update: int, student, optimization, trainer_state: dict, keep_last: int,
         local_state: dict | None = None) -> Path:
    """Save a complete checkpoint after `update` updates; every rank must call it (`local_state`: this rank's
    own state, saved with torch.save)."""
    directory = checkpoint_dir(run_dir, update)
    rank = dist.get_rank()
    if rank == 0 and directory.exists():
        shutil.rmtree(directory)  # an incomplete earlier attempt at this update
    dist.barrier()
    model_state = student.sharded_state_dict()
    optimizer_state = {"optimizer": optimization.optimizer.sharded_state_dict(model_state)}
    student.save_checkpoint(directory / "model", extra=optimizer_state, model_state=model_state)
    (directory / "rng").mkdir(exist_ok=True)
    torch.save(_rng_state(), directory / "rng" / f"rank_{rank:05d}.pt")
    if local_state is not None:
        (directory / "local").mkdir(exist_ok=True)
        torch.save(local_state, directory / "local" / f"rank_{rank:05d}.pt")
    dist.barrier()
    if rank == 0:
        _write_json(directory / "trainer_state.json", trainer_state)
        (directory / MARKER).touch()
        _prune(run_dir, keep_last)
    dist.barrier()
    return directory


def load(directory: Path, student, optimization) -> dict:
    """Load a checkpoint into the student and optimizer (any TP/PP layout); returns the trainer state."""
    if not (directory / MARKER).is_file():
        raise FileNotFoundError(f"{directory} is not a complete checkpoint (no '{MARKER}' marker)")
    model_state = student.sharded_state_dict()
    optimizer_state = {"optimizer": optimization.optimizer.sharded_state_dict(model_state)}
    extra = student.load_checkpoint(directory / "model", extra=optimizer_state, model_state=model_state)
    optimization.optimizer.load_state_dict(extra["optimizer"])
    rng = directory / "rng" / f"rank_{dist.get_rank():05d}.pt"
    if rng.is_file():  # absent when resuming on more ranks than saved: those ranks keep their seeded state
        _set_rng_state(torch.load(rng, weights_only=False))
    return json.loads((directory / "trainer_state.json").read_text())


def load_local(directory: Path) -> dict | None:
    """This rank's own state saved by `save` (None when it saved none)."""
    path = directory / "local" / f"rank_{dist.get_rank():05d}.pt"
    return torch.load(path, weights_only=False) if path.is_file() else None


def _prune(run_dir: Path, keep_last: int) -> None:
    root = Path(run_dir) / "checkpoints"
    complete = complete_checkpoints(run_dir)
    newest = complete[-1][0] if complete else -1
    for path in root.iterdir():
        match = PATTERN.match(path.name)
        if match and not (path / MARKER).is_file() and int(match.group(1)) < newest:
            shutil.rmtree(path)  # left by a run killed while saving
    if keep_last:
        for _, path in complete[:-keep_last]:
            shutil.rmtree(path)
