"""Tiny, fast run configs on the demo models for trainer tests."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from distributed import free_port

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "demo_cpu.yaml"
VOLATILE = ("time", "time/", "throughput/")


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
        "optimizer.lr_warmup_updates=0", "logging.probe_every=0",  # the probe has tests of its own
    ]


def torchrun(overrides: list[str], *, processes: int = 2) -> list[str]:
    """The command line of a training run of the demo config with `overrides`, on `processes` CPU processes."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--master_port",
            str(free_port()), str(REPO / "launch" / "pretrain_dnmopd.py"), "--config", str(DEMO),
            *[arg for o in overrides for arg in ("--set", o)]]


def read_metrics(run_dir: Path, name: str = "run") -> list[dict]:
    return [json.loads(line) for line in (run_dir / name / "metrics.jsonl").read_text().splitlines()]


def stable(records: list[dict]) -> list[dict]:
    """Records without wall-clock measurements (times, throughput, latencies)."""
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE) and not k.endswith("latency_s")}
            for r in records]


def demo_bank(models: Path, path: Path) -> Path:
    """An injection bank with one short teacher answer for every prompt of the sample student set."""
    import torch

    from dnmopd.data.chat import PromptTokenizer
    from dnmopd.data.prompts import PromptSet
    from dnmopd.data.sample_data import sample_file
    from dnmopd.trainer.injection.bank import BankEntry, InjectionBank, prompt_key

    tokenizer = PromptTokenizer.from_pretrained(models / "student")
    prompts = PromptSet.load(sample_file("student/train_3domain.jsonl"), tokenizer, domains=["math", "code", "ifeval"],
                             max_prompt_tokens=1024, model_vocab=1024)
    response = tokenizer.tokenizer("The answer is 4.<|im_end|>", add_special_tokens=False)["input_ids"]
    bank = InjectionBank({prompt_key(p.prompt_ids): BankEntry(p.domain, f"{p.domain}_teacher", tuple(response),
                                                              torch.full((len(response),), -0.5))
                          for p in prompts.prompts})
    return bank.save(path)
