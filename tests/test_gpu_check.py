"""launch/gpu_check.py: its CPU run at toy size (every section, the GPU-only parts skipped with their reasons), the
comparisons its checks rest on, and the wheel recipe installed offline into a fresh Python 3.12 environment."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dnmopd.benchmarks.gpu_report import Check, RowLog, read_rows, verdict
from dnmopd.benchmarks.trainer_check import metric_difference, weight_difference

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "launch" / "gpu_check.py"


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_cpu_tiny_run_passes_every_section(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--out", str(out), "--work",
                           str(work)], env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=2300)
    report = json.loads((out / "gpu_check.json").read_text())
    assert proc.returncode == 0 and report["failed"] == [], proc.stdout[-6000:]
    checks = {(c["section"], c["name"]): c for c in report["checks"]}
    assert {section for section, _ in checks} == {"environment", "trainer", "student", "gpu_tests", "throughput",
                                                   "kernels", "multi_gpu"}
    assert all(c["note"] for c in report["checks"] if c["status"] == "skip")  # every skip says why

    def status(section, name):
        return checks[section, name]["status"], checks[section, name]["value"]

    assert status("environment", "package megatron-core")[0] == "pass"
    assert status("environment", "package flash-linear-attention") == ("warn", "missing")  # reported, not fatal
    # the trainer end to end: resumed and CPU-path runs repeat the reference runs exactly on a CPU
    assert status("trainer", "exact resume: update 2 metrics, max relative difference") == ("pass", 0.0)
    assert status("trainer", "exact resume: released weights, max |difference| / max |weight|") == ("pass", 0.0)
    assert status("trainer", "CPU path, same seed: the same sampled responses")[0] == "pass"
    assert status("trainer", "CPU path, same seed: update 1 metrics on cpu vs CPU, max rel difference") == \
        ("pass", 0.0)
    trained = status("trainer", "release: weights trained (differ from the initial student)")
    assert trained[0] == "pass" and trained[1] > 0
    assert status("trainer", "release reloaded in transformers: logits on cpu vs CPU, max rel difference")[0] == "pass"
    assert {f"update 2 phase: {p} (s)" for p in ("rollout", "scoring", "train", "sync")} <= \
        {name for section, name in checks if section == "trainer"}
    assert status("student", "qwen3_5 grads vs HF (rel), backward via torch")[0] == "pass"
    assert status("student", "GDN FLA cu_seqlens vs torch packed")[0] == "skip"
    assert status("gpu_tests", "pytest -m gpu")[0] == "skip" and "CUDA" in checks["gpu_tests", "pytest -m gpu"]["note"]
    megatron = status("throughput", "megatron update (fwd+bwd+Adam), tokens/s")
    assert megatron[0] == "info" and megatron[1] > 0 and ("throughput", "megatron / transformers tokens/s") in checks
    assert status("throughput", "transformers_fla update (fwd+bwd+Adam), tokens/s")[0] == "skip"
    assert status("kernels", "tiny-tp1 dnmopd (cpu), max rel error vs float64")[0] == "pass"
    assert "--tensor 2" in checks["multi_gpu", "trainer TP 2: DN-MOPD end to end on 2 GPUs"]["note"]
    markdown = (out / "gpu_check.md").read_text()
    assert "| section | check | value | limit | status | note |" in markdown and "0 fail" in markdown


def test_metric_difference_ignores_wall_clock_and_names_the_worst_metric():
    base = {"step": 0, "loss": 2.0, "grad_norm": 1.0, "time/train": 3.0, "throughput/tokens_per_s": 10.0,
            "teacher/math_teacher/latency_s": 0.1, "train_rollout_logprob_abs_diff": 1e-7}
    other = {**base, "time/train": 9.0, "throughput/tokens_per_s": 1.0, "teacher/math_teacher/latency_s": 5.0,
             "train_rollout_logprob_abs_diff": 3e-7}
    assert metric_difference(base, other) == (0.0, "")
    assert metric_difference(base, {**other, "grad_norm": 1.002}) == (pytest.approx(0.002 / 1.002), "grad_norm")
    assert metric_difference(base, {**other, "loss": float("nan")})[1] == "loss"  # NaN never passes
    assert metric_difference(base, {k: v for k, v in other.items() if k != "loss"}) == (float("inf"),
                                                                                         "loss in one run only")


def test_weight_difference_is_relative_to_the_weights_or_to_their_change():
    initial = {"a": torch.zeros(3), "b": torch.ones(2)}
    cpu = {"a": torch.tensor([0.1, -0.2, 0.0]), "b": torch.ones(2)}
    device = {"a": torch.tensor([0.1, -0.19, 0.0]), "b": torch.ones(2), "extra": torch.ones(1)}
    value, note = weight_difference(device, cpu)
    assert value == pytest.approx(0.01 / 1.0) and "only in one: ['extra']" in note
    value, _ = weight_difference(device, cpu, initial)  # against the change from the initial weights
    assert value == pytest.approx(0.01 / 0.2)
    assert weight_difference({"x": torch.ones(1)}, {"y": torch.ones(1)})[0] == float("inf")


def test_rows_are_judged_and_read_back(tmp_path):
    assert verdict(1e-3, 2e-3) == "pass" and verdict(3e-3, 2e-3) == "fail" and verdict(3e-3, 2e-3, False) == "warn"
    assert verdict(float("nan"), 1.0) == "fail" and verdict(None, 1.0) == "fail"
    path = tmp_path / "rows.jsonl"
    log = RowLog(path, "trainer")
    log.judge("resume", 0.0, 1e-5)
    with log.guard("comparison"):
        raise FileNotFoundError("runs/main/release: no *.safetensors files")
    rows = read_rows(path)
    assert [(r.name, r.status) for r in rows] == [("resume", "pass"), ("comparison", "fail")]
    assert "no *.safetensors files" in rows[1].note
    with open(path, "a") as handle:
        handle.write('{"section": "trainer"}\n')
    with pytest.raises(ValueError, match=r"rows.jsonl:3: not a check row"):
        read_rows(path)
    with pytest.raises(ValueError, match="status must be one of"):
        Check("trainer", "x", "ok")


def python312() -> str | None:
    """A Python 3.12 (the GPU image's) as the Makefile's SGLang recipe finds one."""
    for candidate in (shutil.which("python3.12"), *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/"
                                                                                       "python3.12")))):
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.mark.slow
def test_wheel_recipe_installs_offline_into_a_fresh_python312(tmp_path):
    interpreter = python312()
    if interpreter is None:
        pytest.skip("no Python 3.12 here (the GPU image's Python; make sglang-env needs one too)")
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, str(SCRIPT), "--download-wheels", str(wheels)], check=True, timeout=600)
    files = sorted(wheels.glob("*.whl"))
    assert sum(f.stat().st_size for f in files) < 50 * 2**20
    venv = tmp_path / "venv"
    subprocess.run([interpreter, "-m", "venv", str(venv)], check=True, timeout=300)
    site, out = tmp_path / "site", tmp_path / "out"
    proc = subprocess.run([str(venv / "bin" / "python"), str(SCRIPT), "--install-only", "--wheels", str(wheels),
                           "--site", str(site), "--out", str(out)], capture_output=True, text=True, timeout=600)
    report = json.loads((out / "gpu_check.json").read_text())
    assert proc.returncode == 0 and report["failed"] == [], proc.stdout[-3000:]
    installed = {c["name"]: c["value"] for c in report["checks"] if c["name"].startswith("installed ")}
    assert installed == {f"installed {f.name.split('-')[0].lower()}": f.name.split("-")[1] for f in files}
    assert installed["installed megatron_core"] == "0.19.2"
    # the pure-Python ones import from the site folder in the fresh environment
    subprocess.run([str(venv / "bin" / "python"), "-c", "import dill, multiprocess"], check=True, timeout=60,
                   env={**os.environ, "PYTHONPATH": str(site)})
