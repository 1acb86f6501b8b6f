"""Per-update metrics: one JSON line per update in `metrics.jsonl`, the same scalars to TensorBoard and,
when configured, to Weights & Biases. Only the process that owns the log (global rank 0) writes."""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from dnmopd.io import write_jsonl

METRICS_FILE = "metrics.jsonl"


class MetricsLogger:
    @dataclass(kw_only=True, slots=True)
    class Config:
        tensorboard: bool = True
        """Write TensorBoard event files under <run_dir>/tensorboard."""
        wandb_project: str | None = None
        """Also log to this Weights & Biases project (needs `pip install wandb` and a login)."""
        wandb_run_name: str | None = None
        """W&B run name; defaults to the run directory's name."""

    def __init__(self, config: Config, run_dir: Path, *, enabled: bool = True, resume_step: int = 0):
        self.enabled = enabled
        self.resumed: dict = {}
        self.path = Path(run_dir) / METRICS_FILE
        self._tensorboard = self._wandb = None
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = truncate_after(self.path, resume_step)
        self.resumed = {k: v for k, v in kept[-1].items() if k not in ("step", "time")} if kept else {}
        """The metrics of the last update before the resume (the release card of a finished run's re-run)."""
        self._resumed_step = kept[-1]["step"] if kept else None
        if config.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tensorboard = SummaryWriter(str(Path(run_dir) / "tensorboard"), purge_step=resume_step)
        if config.wandb_project:
            try:
                import wandb
            except ImportError:
                raise RuntimeError("wandb_project is set but wandb is not installed: pip install wandb") from None
            self._wandb = wandb.init(project=config.wandb_project, name=config.wandb_run_name or Path(run_dir).name,
                                     dir=str(run_dir), resume="allow")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        record = {"step": step, "time": time.time(), **{k: _plain(v) for k, v in metrics.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(record, allow_nan=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self._tensorboard is not None:
            for key, value in metrics.items():
                if isinstance(value, int | float) and math.isfinite(value):
                    self._tensorboard.add_scalar(key, value, step)
            self._tensorboard.flush()
        if self._wandb is not None:
            self._wandb.log(metrics, step=step)

    def restore(self, step: int, metrics: dict[str, float]) -> None:
        """Log `step`'s record from the checkpoint saved after it, if the file lacks it: the record is written
        after the checkpoint (it carries the checkpoint's time), so a run can end between the two."""
        if self.enabled and self._resumed_step != step:
            self.log(step, metrics)
            self.resumed, self._resumed_step = dict(metrics), step

    def close(self) -> None:
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb is not None:
            self._wandb.finish()


def _plain(value):
    return float(value) if hasattr(value, "item") else value


def read_metrics(path: Path) -> list[dict]:
    """Every record of a metrics.jsonl file, in order; a torn last line (a crash mid-write) is dropped."""
    records = []
    lines = Path(path).read_text().splitlines()
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number != len(lines):
                raise ValueError(f"{path}:{number}: not a JSON record") from None
    return records


def truncate_after(path: Path, step: int) -> list[dict]:
    """Keep only records of updates before `step` (a resumed run re-logs the updates after its checkpoint);
    returns them."""
    if not path.exists():
        return []
    records = read_metrics(path)
    kept = [r for r in records if r["step"] < step]
    if len(kept) < len(records):
        write_jsonl(path, kept)
    return kept
