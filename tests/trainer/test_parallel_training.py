"""One update of the demo at TP=2 and at PP=2 (2 CPU processes) equals the single-process update: same loss,
same gradient norm, same exact KL, and the same released weights (at TP=2 the Gated DeltaNet output norm's scale,
which every head uses while the ranks split the heads, takes its gradient from both ranks)."""

import os
import subprocess
import sys

import pytest
import torch
from distributed import free_port
from run_helpers import DEMO, REPO, read_metrics, tiny_overrides
from safetensors.torch import load_file


def one_update(models, run_dir, processes, extra):
    overrides = tiny_overrides(models, run_dir, updates=1) + ["method.loss.kind=full_vocab_reverse_kl",
                                                              "checkpoint.export_hf=true", "optimizer.name=sgd",
                                                              "optimizer.lr=0.1", *extra]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--master_port",
               str(free_port()), str(REPO / "launch" / "pretrain_dnmopd.py"), "--config", str(DEMO),
               *[arg for o in overrides for arg in ("--set", o)]]
    subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, capture_output=True,
                   timeout=900)
    return read_metrics(run_dir)[0], load_file(run_dir / "run" / "release" / "model.safetensors")


@pytest.mark.slow
def test_tensor_and_pipeline_parallel_updates_equal_one_process(demo_models, tmp_path):
    single, single_weights = one_update(demo_models, tmp_path / "single", 1, [])
    for layout in ("parallel.tensor=2", "parallel.pipeline=2"):
        parallel, weights = one_update(demo_models, tmp_path / layout, 2, [layout])
        for key in ("loss", "grad_norm", "kl_full/all", "kl/all"):
            assert parallel[key] == pytest.approx(single[key], rel=1e-4), (layout, key)
        assert weights.keys() == single_weights.keys()
        for name, weight in weights.items():  # SGD: each weight moved by 0.1 x its (clipped) gradient
            torch.testing.assert_close(weight, single_weights[name], atol=1e-6, rtol=0,
                                       msg=lambda problem, where=f"{layout} {name}": f"{where}: {problem}")
