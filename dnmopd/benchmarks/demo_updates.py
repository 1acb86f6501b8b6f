"""Per-update time of the CPU demo on each kernel backend, measured in turns in one invocation.

Each backend runs ``make demo``'s command (``configs/demo_cpu.yaml`` on 2 torchrun processes, one thread
each) for ``updates`` updates in a fresh run folder, with ``DNMOPD_KERNEL_BACKEND`` set: ``native`` (what
the demo uses on CPU) and ``triton`` under ``TRITON_INTERPRET=1`` (what it used before the native path).
With ``rounds`` > 1 the backends take turns (native, triton, native, ...), so that a change in the machine's
load falls on both. An update's time is the sum of the phases the trainer logs for it (``time/rollout``:
rollout and teacher scoring, ``time/train``, ``time/sync``: weight sync); ``time/train`` alone is where the
kernels run. The first update of every run also pays one-time start-up work (first calls, allocations) and
is left out of the medians (kept in the per-update lists); ratios are of the medians.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from dnmopd.kernels.utils import BACKEND_ENV
from dnmopd.trainer.measurements.metrics import METRICS_FILE, read_metrics

DEMO_CONFIG = Path("configs/demo_cpu.yaml")
DEMO_MODELS = Path("runs/demo-models")  # where configs/demo_cpu.yaml looks for its models
PHASES = ("time/rollout", "time/train", "time/sync")  # the trainer's update phases, one after the other


@dataclass
class DemoTiming:
    backend: str
    update_s: list[float] = field(default_factory=list)  # per update, sum of the PHASES, runs concatenated
    train_s: list[float] = field(default_factory=list)  # per update, time/train
    steady: list[bool] = field(default_factory=list)  # false for the first update of each run
    wall_s: list[float] = field(default_factory=list)  # per run: the whole command, start-up and checkpoint

    def _median(self, values: list[float]) -> float:
        kept = [v for v, steady in zip(values, self.steady, strict=True) if steady] or values
        return statistics.median(kept)

    @property
    def median_update_s(self) -> float:
        return self._median(self.update_s)

    @property
    def median_train_s(self) -> float:
        return self._median(self.train_s)

    def add(self, other: DemoTiming) -> None:
        self.update_s += other.update_s
        self.train_s += other.train_s
        self.steady += other.steady
        self.wall_s += other.wall_s


def _env(backend: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env[BACKEND_ENV] = backend
    if backend == "triton":
        env["TRITON_INTERPRET"] = "1"
    return env


def run_backend(repo: Path, out_dir: Path, backend: str, updates: int, overrides: list[str]) -> DemoTiming:
    """One demo run of ``updates`` updates on ``backend``; its log goes to ``out_dir/demo_<backend>.log``."""
    run_root = out_dir / "demo_runs"
    shutil.rmtree(run_root / backend, ignore_errors=True)  # a leftover run would be resumed, not re-run
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "launch/pretrain_dnmopd.py", "--config", str(DEMO_CONFIG),
        "--set", f"run.output_dir={run_root.resolve()}", "--set", f"run.name={backend}",
        "--set", f"train.updates={updates}", "--set", f"checkpoint.save_every={updates}",
        *(arg for item in overrides for arg in ("--set", item)),
    ]
    log_path = out_dir / f"demo_{backend}.log"
    start = time.perf_counter()
    with log_path.open("w") as log:
        proc = subprocess.run(command, cwd=repo, env=_env(backend), stdout=log, stderr=subprocess.STDOUT)
    timing = DemoTiming(backend, wall_s=[time.perf_counter() - start])
    if proc.returncode != 0:
        raise RuntimeError(f"demo run on {backend} failed (exit {proc.returncode}); see {log_path}")
    metrics = run_root / backend / METRICS_FILE
    records = read_metrics(metrics)
    for record in records:
        if "time/rollout" not in record or "time/train" not in record:
            raise RuntimeError(f"{metrics}: update {record.get('step')} lacks time/rollout or time/train")
        timing.update_s.append(sum(record.get(phase, 0.0) for phase in PHASES))
        timing.train_s.append(record["time/train"])
        timing.steady.append(bool(timing.steady) or updates == 1)
    if len(records) != updates:
        raise RuntimeError(f"{metrics}: {len(records)} updates logged, expected {updates}")
    return timing


def compare(repo: Path, out_dir: Path, updates: int, overrides: list[str] = (), rounds: int = 1,
            backends=("native", "triton"), progress=print) -> list[DemoTiming]:
    """Build the demo's models (reused when present), then time the demo on the backends in turns."""
    out_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "dnmopd.examples.demo_models", str(DEMO_MODELS)], cwd=repo, check=True,
                   stdout=subprocess.DEVNULL)
    timings = {backend: DemoTiming(backend) for backend in backends}
    for round_index in range(rounds):
        for backend in backends:
            progress(f"[bench] demo round {round_index + 1}/{rounds} on {backend}: {updates} updates")
            timing = run_backend(repo, out_dir, backend, updates, list(overrides))
            progress(f"[bench] demo on {backend}: update s {[round(t, 2) for t in timing.update_s]}, "
                     f"train s {[round(t, 2) for t in timing.train_s]}")
            timings[backend].add(timing)
    return list(timings.values())


def markdown(timings: list[DemoTiming]) -> str:
    base = timings[0]
    lines = [
        f"| backend | update s (median) | train s (median) | update x {base.backend} | train x {base.backend} | "
        "per-update s (first of each run in brackets) | train s | wall s per run |",
        "|---|---:|---:|---:|---:|---|---|---|",
    ]

    def listed(values, steady):
        return ", ".join(f"{v:.2f}" if keep else f"({v:.2f})" for v, keep in zip(values, steady, strict=True))

    for t in timings:
        lines.append(
            f"| {t.backend} | {t.median_update_s:.2f} | {t.median_train_s:.2f} | "
            f"{t.median_update_s / base.median_update_s:.2f} | {t.median_train_s / base.median_train_s:.2f} | "
            f"{listed(t.update_s, t.steady)} | {listed(t.train_s, t.steady)} | "
            f"{', '.join(f'{w:.0f}' for w in t.wall_s)} |"
        )
    return "\n".join(lines)
