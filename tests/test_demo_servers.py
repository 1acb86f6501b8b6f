"""`make demo-servers` (launch/demo_servers.sh): a cluster run's server path on this machine, with real vLLM CPU
servers, the real trainer through launch/slurm/dnmopd.sbatch --local, and the release evaluated through a server
of its own by launch/evaluate.py. Run here as the make target runs it, in a folder of its own (the checkout's
configs/ and launch/ linked in), on free ports."""

import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_env import vllm_python

from dnmopd.trainer.measurements.metrics import read_metrics

REPO = Path(__file__).resolve().parents[1]
TEACHERS = ("math_teacher", "code_teacher", "ifeval_teacher")
pytestmark = pytest.mark.slow  # five vLLM server starts and a short training run: ~2 min on 2 free cores


def free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def six_free_ports() -> int:
    for _ in range(100):
        first = random.randrange(20000, 60000)
        if all(free(first + i) for i in range(6)):
            return first
    raise RuntimeError("no six consecutive free ports")


def test_the_server_path_rehearsed_on_cpu(tmp_path):
    python = vllm_python()
    for folder in ("configs", "launch"):
        (tmp_path / folder).symlink_to(REPO / folder)
    port = six_free_ports()
    env = {**os.environ, "VLLM_PYTHON": str(python), "PYTHON": sys.executable,
           "TORCHRUN": str(Path(sys.executable).parent / "torchrun"), "DEMO_SERVERS_PORT": str(port),
           "VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache")}
    result = subprocess.run(["bash", "launch/demo_servers.sh"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=1500)
    run = tmp_path / "runs" / "demo-servers"
    logs = run / "job" / "server_logs"
    assert result.returncode == 0, result.stdout[-6000:] + "".join(
        f"\n--- {log.name}\n" + "\n".join(log.read_text().splitlines()[-30:]) for log in logs.glob("*.log"))
    out = result.stdout
    assert "dnmopd.sbatch: all servers healthy" in out
    assert ("release runs/demo-servers/release, plots runs/demo-servers/plots, evaluation runs/demo-servers/eval"
            in out)

    # trained from the servers: rollout in bfloat16 (its log-probs differ from the trainer's float32 ones by
    # about 0.02), every teacher scored over HTTP, and every update's weights sent to the rollout server and
    # probed there (a failed probe stops the run)
    records = read_metrics(run / "metrics.jsonl")
    assert len(records) == 3
    for record in records:
        assert 0.005 < record["train_rollout_logprob_abs_diff"] < 0.05
        assert all(record[f"teacher/{t}/latency_s"] > 0 and record[f"teacher/{t}/failures"] == 0 for t in TEACHERS)
    rollout_log = (logs / f"rollout-{port}.log").read_text()
    assert rollout_log.count('"POST /collective_rpc HTTP/1.1" 200') == 3  # one weight reload per update
    for i, teacher in enumerate(TEACHERS, start=1):
        assert '"POST /v1/completions HTTP/1.1" 200' in (logs / f"{teacher}-{port + i}.log").read_text()

    assert (run / "release" / "config.json").is_file() and (run / "plots" / "multipliers.png").is_file()
    summary = json.loads((run / "eval" / "demo-servers" / "summary_cap64.json").read_text())
    assert summary["name"] == "demo-servers" and set(summary["suites"]) == {"ifbench", "aime25", "lcb_v5"}
    assert f"release (vllm) on http://127.0.0.1:{port + 4}: runs/demo-servers/release" in (
        run / "eval-servers.log").read_text()  # the release evaluated on a server of its own
    assert not any(listening(port + i) for i in range(6))  # every server stopped
