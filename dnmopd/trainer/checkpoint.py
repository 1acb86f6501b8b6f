"""Resumable run checkpoints: <run_dir>/checkpoints/iter_<update:07d>/

    model/               megatron-core distributed checkpoint of the student and the optimizer (any TP/PP)
    trainer_state.json   update counter, sampler position, method state (frozen multipliers), LR schedule, ...
    rng/rank_<r>.pt      every rank's python / numpy / torch / CUDA RNG states
    local/rank_<r>.pt    every rank's own trainer state (the batch collected ahead, train.rollout_ahead 1)
    manifest.json        what the checkpoint was trained on (config, input files, models: `manifest`)
    complete             written last by rank 0: the world size and the size and sha256 of every other file

A checkpoint is complete only with its marker, which is written once every file is on disk (fsynced), so a
run killed while saving resumes from the previous one; `keep_last` removes older checkpoints only after a
newer one is complete. Resuming checks every file of the newest complete checkpoint against its marker: a
damaged checkpoint is named with its bad files, renamed to `iter_<update>.damaged` and the previous complete
one is loaded (saying so); with none left the run stops. A run directory with checkpoints but no complete
one stops too (`checkpoint.resume: fresh` starts over). A save that fails because the disk is full, over quota or
read-only says so (`dnmopd.io.disk_errors`) and leaves the previous checkpoints as they were.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from dnmopd.io import apply_default_modes, atomic_write, disk_errors, sha256_file

logger = logging.getLogger(__name__)

MARKER = "complete"
MANIFEST = "manifest.json"
MARKER_FORMAT = "dnmopd-checkpoint/1"
PATTERN = re.compile(r"^iter_(\d{7})$")


class CheckpointError(RuntimeError):
    """No checkpoint to resume from although the run has some, or the ones there are damaged."""


def checkpoint_dir(run_dir: Path, update: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"iter_{update:07d}"


def rng_file(directory: Path, rank: int) -> Path:
    return directory / "rng" / f"rank_{rank:05d}.pt"


def local_file(directory: Path, rank: int) -> Path:
    return directory / "local" / f"rank_{rank:05d}.pt"


def _checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    root = Path(run_dir) / "checkpoints"
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := PATTERN.match(p.name))] if root.is_dir() else []
    return sorted(found)


def complete_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    return [(update, path) for update, path in _checkpoints(run_dir) if (path / MARKER).is_file()]


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


def _warn(message: str, *args) -> None:
    if dist.get_rank() == 0:
        logger.warning(message, *args)


def _write_json(path: Path, value: dict) -> None:
    with atomic_write(path) as f:
        json.dump(value, f, indent=1)


def _shares(items: list, rank: int, world: int) -> list:
    """This rank's share of a work list that rank 0 lists (the same list on every rank)."""
    listed = [items if rank == 0 else None]
    dist.broadcast_object_list(listed, src=0)
    return listed[0][rank::world]


def _gather(part):
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, part)
    return parts


def _file_record(path: Path) -> dict:
    with open(path, "rb") as f:
        os.fsync(f.fileno())  # on disk before the marker says the checkpoint is complete
    return {"bytes": path.stat().st_size, "sha256": sha256_file(path)}


def save(run_dir: Path, update: int, student, optimization, trainer_state: dict, keep_last: int,
         local_state: dict | None = None, manifest: dict | None = None) -> Path:
    """Save a complete checkpoint after `update` updates; every rank must call it (`local_state`: this rank's
    own state, saved with torch.save; `manifest`: rank 0's run manifest)."""
    directory = checkpoint_dir(run_dir, update)
    with disk_errors(directory, "the checkpoint"):
        _save(run_dir, directory, student, optimization, trainer_state, keep_last, local_state, manifest)
    return directory


def _save(run_dir: Path, directory: Path, student, optimization, trainer_state: dict, keep_last: int,
          local_state: dict | None, manifest: dict | None) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0 and directory.exists():
        shutil.rmtree(directory)  # an incomplete earlier attempt at this update
    dist.barrier()
    model_state = student.sharded_state_dict()
    optimizer_state = {"optimizer": optimization.optimizer.sharded_state_dict(model_state)}
    student.save_checkpoint(directory / "model", extra=optimizer_state, model_state=model_state)
    with atomic_write(rng_file(directory, rank), "wb") as f:
        torch.save(_rng_state(), f)
    if local_state is not None:
        with atomic_write(local_file(directory, rank), "wb") as f:
            torch.save(local_state, f)
    if rank == 0:
        _write_json(directory / "trainer_state.json", trainer_state)
        if manifest is not None:
            _write_json(directory / MANIFEST, manifest)
    dist.barrier()
    files = sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()) \
        if rank == 0 else None
    records = {name: _file_record(directory / name) for name in _shares(files, rank, world)}
    if rank == 0:
        listed = {name: record for part in _gather(records) for name, record in part.items()}
        apply_default_modes(directory)
        _write_json(directory / MARKER, {"format": MARKER_FORMAT, "world_size": world,
                                         "files": dict(sorted(listed.items()))})
        _prune(run_dir, keep_last)
    else:
        _gather(records)
    dist.barrier()


def damage(directory: Path) -> list[str]:
    """What is wrong with a complete checkpoint (missing, truncated or altered files), identically on every rank;
    [] when every file matches its marker."""
    rank, world = dist.get_rank(), dist.get_world_size()
    marker = directory / MARKER
    try:
        record = json.loads(marker.read_text())
        files = record["files"] if record.get("format") == MARKER_FORMAT else None
    except (OSError, ValueError, AttributeError, KeyError):
        files = None
    problems = [] if isinstance(files, dict) else [f"{marker}: not a {MARKER_FORMAT} marker with a file list"]
    names = sorted(files) if not problems else []
    for name in _shares(names, rank, world):
        path, want = directory / name, files[name]
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.stat().st_size != want["bytes"]:
            problems.append(f"{path}: {path.stat().st_size} bytes, {want['bytes']} when saved")
        elif sha256_file(path) != want["sha256"]:
            problems.append(f"{path}: contents changed since it was saved (sha256 mismatch)")
    return sorted({p for part in _gather(problems) for p in part})


def load(directory: Path, student, optimization) -> dict:
    """Load a checkpoint into the student and optimizer (any TP/PP layout); returns the trainer state."""
    marker = directory / MARKER
    if not marker.is_file():
        raise FileNotFoundError(f"{directory} is not a complete checkpoint (no '{MARKER}' marker)")
    saved_world = json.loads(marker.read_text())["world_size"]
    model_state = student.sharded_state_dict()
    # is_loading: a fresh optimizer has no moments yet; without it only the param groups would be requested
    optimizer_state = {"optimizer": optimization.optimizer.sharded_state_dict(model_state, is_loading=True)}
    extra = student.load_checkpoint(directory / "model", extra=optimizer_state, model_state=model_state)
    optimization.load_optimizer_state(extra["optimizer"])
    rank = dist.get_rank()
    rng = rng_file(directory, rank)
    if rank < saved_world:
        if not rng.is_file():
            raise FileNotFoundError(f"{rng}: the RNG state of rank {rank} is missing")
        _set_rng_state(torch.load(rng, weights_only=False))
    elif rank == saved_world:
        logger.warning("%s was saved by %d ranks: ranks >= %d keep their seeded RNG state", directory, saved_world,
                       saved_world)
    return json.loads((directory / "trainer_state.json").read_text())


def find(run_dir: Path, policy: bool | str) -> Path | None:
    """The checkpoint to continue from under `checkpoint.resume` (`policy`), its files checked (a damaged one is
    set aside for the previous complete one), or None to start at update 0. Every rank must call it."""
    run_dir = Path(run_dir)
    found = _checkpoints(run_dir)
    if policy == "fresh":
        if found and dist.get_rank() == 0:
            _warn("checkpoint.resume: fresh: removing the %d checkpoints of %s", len(found), run_dir)
            shutil.rmtree(run_dir / "checkpoints")
        dist.barrier()
        return None
    if not found:
        return None
    names = ", ".join(path.name for _, path in found)
    if policy is False:
        raise CheckpointError(f"{run_dir / 'checkpoints'} holds checkpoints ({names}) and checkpoint.resume is false: "
                              "set checkpoint.resume: true to continue the run, or fresh to start over (removes them)")
    complete = complete_checkpoints(run_dir)
    if not complete:
        raise CheckpointError(
            f"{run_dir / 'checkpoints'}: no complete checkpoint among {names} (none has its '{MARKER}' marker, e.g. "
            "the run was killed while saving): nothing to resume; set checkpoint.resume: fresh to start over "
            "(removes them)")
    damaged = []
    for update, directory in reversed(complete):
        problems = damage(directory)
        if not problems:
            if damaged:
                _set_aside(damaged)
                _warn("resuming from the previous complete checkpoint %s (update %d) instead", directory, update)
            return directory
        _warn("checkpoint %s is damaged: %s", directory, "; ".join(problems))
        damaged.append((directory, problems))
    report = "; ".join(problem for _, problems in damaged for problem in problems)
    raise CheckpointError(f"no usable checkpoint in {run_dir / 'checkpoints'}: {report}; restore the files, or set "
                          "checkpoint.resume: fresh to start over (removes them)")


def read_manifest(directory: Path) -> dict | None:
    """The run manifest saved in a checkpoint (None: saved before checkpoints had one)."""
    path = Path(directory) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


def _set_aside(damaged: list[tuple[Path, list[str]]]) -> None:
    """Rename damaged checkpoints out of the resume and prune sets (kept for inspection)."""
    if dist.get_rank() == 0:
        for directory, _ in damaged:
            target = directory.with_name(directory.name + ".damaged")
            if target.exists():
                shutil.rmtree(target)
            directory.rename(target)
            _warn("moved the damaged checkpoint to %s", target)
    dist.barrier()


def load_local(directory: Path) -> dict | None:
    """This rank's own state saved by `save` (None when it saved none)."""
    path = local_file(directory, dist.get_rank())
    return torch.load(path, weights_only=False) if path.is_file() else None


def _prune(run_dir: Path, keep_last: int) -> None:
    """Remove incomplete checkpoints older than the newest complete one, and complete ones beyond `keep_last`."""
    complete = complete_checkpoints(run_dir)
    newest = complete[-1][0] if complete else -1
    for update, path in _checkpoints(run_dir):
        if update < newest and not (path / MARKER).is_file():
            shutil.rmtree(path)  # left by a run killed while saving
    if keep_last:
        for _, path in complete[:-keep_last]:
            shutil.rmtree(path)
