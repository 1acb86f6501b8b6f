"""`make demo`'s two commands (the models built fresh, 4 updates instead of 30) print what a person reads: one
rank's lines, no library noise, a table row per update within 80 columns, start and end lines with times for the
start-up, each checkpoint and the release, and a summary of where everything is; the checkpoint time is also a
metric."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dnmopd.trainer.measurements.metrics import read_metrics

REPO = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\s*\d+/\d+\s")
TIMESTAMP = re.compile(r"^\d\d:\d\d:\d\d ")
MOST_OTHER_LINES = 40


@pytest.mark.slow
def test_the_demo_prints_one_ranks_readable_lines(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    commands = [[sys.executable, "-m", "dnmopd.examples.demo_models", "runs/demo-models"],
                [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                 str(REPO / "launch" / "pretrain_dnmopd.py"), "--config", str(REPO / "configs" / "demo_cpu.yaml"),
                 "--set", "train.updates=4", "--set", "checkpoint.save_every=2"]]
    lines = []
    for command in commands:
        result = subprocess.run(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, timeout=900)
        assert result.returncode == 0, result.stdout[-5000:]
        lines += result.stdout.splitlines()
    text = "\n".join(lines)

    rows = [line for line in lines if ROW.match(line)]
    others = [line for line in lines if not ROW.match(line)]
    assert [row.split()[0] for row in rows] == ["1/4", "2/4", "3/4", "4/4"], text
    assert max(len(line) for line in rows) <= 80
    assert len(others) < MOST_OTHER_LINES, text
    messages = [TIMESTAMP.sub("", line) for line in others]
    assert len(set(messages)) == len(messages), text  # no line twice: one rank speaks
    assert not [line for line in lines if re.search(r"\brank [1-9]|Warning|warn\(|%\|", line)], text

    for started in ("start-up (student, data, rollout engine, teachers)", "checkpoint after update 2",
                    "checkpoint after update 4", "release runs/demo-cpu/release"):
        assert f"{started} ..." in text and re.search(rf"{re.escape(started)}: done in \d+\.\d s", text), started
    summary = lines[lines.index(next(line for line in lines if line.startswith("done: 4 updates"))):]
    assert [line.split()[0] for line in summary[1:]] == ["checkpoint", "release", "plots", "metrics", "probe"]
    assert summary[1].split()[1] == "runs/demo-cpu/checkpoints/iter_0000004" and "probe_kl" in summary[3]

    records = read_metrics(tmp_path / "runs" / "demo-cpu" / "metrics.jsonl")
    assert [("time/checkpoint" in r) for r in records] == [False, True, False, True]
    assert all(r["timeline/checkpoint/end"] >= r["timeline/checkpoint/start"] > r["timeline/train/end"]
               for r in records if "time/checkpoint" in r)
