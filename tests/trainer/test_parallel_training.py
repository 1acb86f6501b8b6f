"""One update of the demo at TP=2 and at PP=2 (2 CPU processes) equals the single-process update: same loss,
same gradient norm, same exact KL."""

import os
import subprocess
import sys

import pytest
from distributed import free_port
from run_helpers import DEMO, REPO, read_metrics, tiny_overrides


def one_update(models, run_dir, processes, extra):
    overrides = tiny_overrides(models, run_dir, updates=1) + ["method.loss.kind=full_vocab_reverse_kl", *extra]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--master_port",
               str(free_port()), str(REPO / "launch" / "pretrain_dnmopd.py"), "--config", str(DEMO),
               *[arg for o in overrides for arg in ("--set", o)]]
    subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, capture_output=True,
                   timeout=900)
    return read_metrics(run_dir)[0]


@pytest.mark.slow
def test_tensor_and_pipeline_parallel_updates_equal_one_process(demo_models, tmp_path):
    single = one_update(demo_models, tmp_path / "single", 1, [])
    for layout in ("parallel.tensor=2", "parallel.pipeline=2"):
        parallel = one_update(demo_models, tmp_path / layout, 2, [layout])
        for key in ("loss", "grad_norm", "kl_full/all", "kl/all"):
            assert parallel[key] == pytest.approx(single[key], rel=1e-4), (layout, key)
