"""Distributed checkpoints reshard: saved at TP=2, loaded at TP=1 and at PP=2, same logits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from distributed import free_port
from student_fixtures import tiny_models  # noqa: F401

HERE = Path(__file__).parent


def test_tp2_checkpoint_loads_at_tp1_and_pp2(tiny_models, tmp_path):  # noqa: F811
    result = tmp_path / "result.json"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
        str(HERE / "student_checkpoint_worker.py"), tiny_models["qwen3_5"], str(tmp_path / "ckpt"), str(result),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = json.loads(result.read_text())
    for r in ranks:
        assert r["saved_padded_vocab"] == 512 and r["tp1_padded_vocab"] == 512  # recorded, not recomputed (384)
        assert r["tp1"] <= 1e-5, r
        assert r["tp1_extra"] == r["pp2_extra"] == {"trainer": {"step": 80}}
    assert sorted(r["pp2"] is None for r in ranks) == [False, True]
    assert all(r["pp2"] is None or r["pp2"] <= 1e-5 for r in ranks), ranks
    ckpt = tmp_path / "ckpt"
    assert (ckpt / "student.json").is_file() and not (tmp_path / "ckpt.tmp").exists()
