"""Tiny, fast run configs on the demo models for trainer tests."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "demo_cpu.yaml"


def tiny_overrides(models: Path, run_dir: Path, *, updates: int = 3, name: str = "run") -> list[str]:
    """Overrides that point the demo config at `models` and shrink it to seconds per update."""
    teachers = ", ".join(f"{{backend: inprocess, name: {d}_teacher, model_path: {models / f'{d}_teacher'}}}"
                         for d in ("math", "code", "ifeval"))
    return [
        f"run.name={name}", f"run.output_dir={run_dir}", f"student.hf_path={models / 'student'}",
        f"rollout.engine.model_path={models / 'student'}", f"teachers.models=[{teachers}]",
        f"train.updates={updates}", "data.sampler.prompts_per_rollout=3", "data.samples_per_prompt=2",
        "rollout.sampling.max_new_tokens=8", "checkpoint.export_hf=false", "logging.progress=false",
        "logging.report=false", "logging.metrics.tensorboard=false", "optimizer.lr=1e-3",
        "optimizer.lr_warmup_updates=0",
    ]


def read_metrics(run_dir: Path, name: str = "run") -> list[dict]:
    return [json.loads(line) for line in (run_dir / name / "metrics.jsonl").read_text().splitlines()]
