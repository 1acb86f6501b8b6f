"""Releases written by short trainer runs (the trainer's own output, as a user gets it), built locally.

Each run distils a tiny random student (with the tiny Qwen-style tokenizer and its real chat template) from a
sharper copy of itself for two DN-MOPD updates on the sample prompts, one process, under the umask `UMASK`,
and exports `<run>/release` at the end. The Qwen3.5 student has Gated DeltaNet heads of the real size (128),
which vLLM's CPU kernel requires.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "demo_cpu.yaml"
VOCAB = 1024
UMASK = 0o027
ARCHS = {
    "qwen3": {"flavor": "qwen3", "num_layers": 2, "overrides": {}},
    "qwen3_5": {"flavor": "qwen3.5", "num_layers": 4,
                "overrides": {"linear_key_head_dim": 128, "linear_value_head_dim": 128}},
}
CARD = {"qwen3_5": ["checkpoint.release.base_model=Qwen/Qwen3.5-0.8B", "checkpoint.release.license=apache-2.0"],
        "qwen3": []}


def build_models(root: Path, arch: str) -> tuple[Path, Path]:
    """(student, teacher): a tiny random `arch` model and a copy whose logits are twice as sharp."""
    from dnmopd.examples.demo_models import scaled_copy
    from dnmopd.examples.tiny import build_tiny_hf_checkpoint
    from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

    spec = ARCHS[arch]
    tokenizer = build_tiny_tokenizer(root / "tokenizer", flavor=spec["flavor"], vocab_size=VOCAB)
    student = build_tiny_hf_checkpoint(root / "student", arch=arch, vocab_size=VOCAB, seed=0,
                                       num_layers=spec["num_layers"], tokenizer_dir=tokenizer,
                                       overrides=spec["overrides"])
    return student, scaled_copy(student, root / "teacher", 2.0)


def train_and_release(root: Path, arch: str, *, name: str = "run") -> Path:
    """Run the trainer (2 updates, a checkpoint after each) and return its run directory."""
    student, teacher = build_models(root / "models", arch)
    teachers = ", ".join(f"{{backend: inprocess, name: {d}_teacher, model_path: {teacher}}}"
                         for d in ("math", "code", "ifeval"))
    overrides = [
        f"run.name={name}", f"run.output_dir={root}", f"student.hf_path={student}",
        f"rollout.engine.model_path={student}", f"teachers.models=[{teachers}]", "train.updates=2",
        "data.sampler.prompts_per_rollout=3", "data.samples_per_prompt=2", "rollout.sampling.max_new_tokens=8",
        "checkpoint.save_every=1", "checkpoint.keep_last=2", "logging.progress=false", "logging.report=false",
        "logging.metrics.tensorboard=false", "optimizer.lr=1e-3", "optimizer.lr_warmup_updates=0", *CARD[arch],
    ]
    pretrain(["--config", str(DEMO), *[arg for o in overrides for arg in ("--set", o)]])
    return root / name


def pretrain(arguments: list[str]) -> None:
    """`launch/pretrain_dnmopd.py ARGUMENTS` on one process under the umask `UMASK`; fails the test if it fails."""
    command = [sys.executable, str(REPO / "launch" / "pretrain_dnmopd.py"), *arguments]
    proc = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=900, preexec_fn=lambda: os.umask(UMASK))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
