"""A run killed in the middle of an update resumes from its last checkpoint and logs exactly the metrics of an
uninterrupted run (2 CPU processes, data parallel 2)."""

import os
import signal
import subprocess
import sys
import time

import pytest
from distributed import free_port
from run_helpers import DEMO, REPO, read_metrics, tiny_overrides

VOLATILE = ("time", "time/", "throughput/")


def command(models, run_dir):
    overrides = tiny_overrides(models, run_dir, updates=6) + ["checkpoint.save_every=2",
                                                              "data.sampler.prompts_per_rollout=4"]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
            str(REPO / "launch" / "pretrain_dnmopd.py"), "--config", str(DEMO),
            *[arg for o in overrides for arg in ("--set", o)]]


def stable(records):
    """Records without wall-clock measurements (times, throughput, latencies)."""
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE) and not k.endswith("latency_s")}
            for r in records]


@pytest.mark.slow
def test_killed_run_resumes_with_identical_metrics(demo_models, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    full, interrupted = tmp_path / "full", tmp_path / "interrupted"
    subprocess.run(command(demo_models, full), env=env, check=True, capture_output=True, timeout=900)

    process = subprocess.Popen(command(demo_models, interrupted), env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    marker = interrupted / "run" / "checkpoints" / "iter_0000002" / "complete"
    deadline = time.time() + 600
    while not marker.exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.02)
    assert marker.exists(), "the run never wrote its first checkpoint"
    os.killpg(process.pid, signal.SIGKILL)  # right after the checkpoint of update 2: inside update 3 of 6
    process.wait()
    assert len(read_metrics(interrupted)) < 6

    subprocess.run(command(demo_models, interrupted), env=env, check=True, capture_output=True, timeout=900)
    assert stable(read_metrics(interrupted)) == stable(read_metrics(full))
