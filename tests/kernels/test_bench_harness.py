"""launch/bench_kernels.py on the CPU shapes: every provider that runs on CPU reports (native, interpreter,
torch), GPU ones are skipped; the host peak-memory measurement follows the live tensors."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "launch" / "bench_kernels.py"


def _bench_main():
    spec = importlib.util.spec_from_file_location("bench_kernels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_cpu_quick_run_writes_reports(tmp_path):
    impls = "floor,floor_chunked,dnmopd,dnmopd:chunk_rows=40,dnmopd:backend=triton,torch,liger,cce"
    # a subprocess: the CPU run sets process-wide malloc options for its memory measurement
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--repeats", "1",
                           "--impls", impls, "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "bench_kernels.json").read_text())
    rows = {(r["shape"], r["impl"]): r for r in report["results"]}
    assert {s for s, _ in rows} == {"tiny-tp1", "tiny-tp2"}
    tracked = report["meta"]["host_memory"] == "resident-set high-water mark"
    for shape in ("tiny-tp1", "tiny-tp2"):
        assert rows[(shape, "floor")]["ratio_to_floor"] == 1.0
        for impl in ("dnmopd", "dnmopd[chunk_rows=40]", "dnmopd[backend=triton]", "torch"):
            row = rows[(shape, impl)]
            assert row["status"] == "ok" and row["median_ms"] > 0, row
            assert row["grad_hidden_rel_err"] < 1e-5 and row["grad_weight_rel_err"] < 1e-5, row
            assert (row["peak_extra_gib"] is not None) == tracked, row
        for impl in ("liger", "cce"):
            assert rows[(shape, impl)]["status"] == "skipped"
            assert "CUDA" in rows[(shape, impl)]["reason"]
    table = (tmp_path / "bench_kernels.md").read_text()
    assert "| tiny-tp1 (96x32x1000) | dnmopd[backend=triton] |" in table
    assert "skipped: needs a CUDA device" in proc.stdout


HOST_MEMORY_CHECK = """
import json, torch
from dnmopd.benchmarks import host_memory
reason = host_memory.track_freed_memory()
if reason:
    print(json.dumps({"reason": reason})); raise SystemExit
MIB = 2**20
def one_at_a_time():  # 64 MiB live at most: each tensor is freed before the next one exists
    for _ in range(3):
        torch.ones(16 * MIB).sum()
def two_at_once():
    a, b = torch.ones(16 * MIB), torch.ones(16 * MIB)
    return (a + b).sum()  # a third 64 MiB for the sum
def eight_small():  # eight 4 MiB tensors alive at once
    keep = [torch.ones(MIB) for _ in range(8)]
    return sum(t.sum() for t in keep)
eight_small()  # a first round whose freed blocks malloc could keep for reuse
print(json.dumps({"one": host_memory.peak_during(one_at_a_time) / MIB,
                  "three": host_memory.peak_during(two_at_once) / MIB,
                  "small": host_memory.peak_during(eight_small) / MIB}))
"""


def test_host_peak_memory_follows_live_tensors():
    proc = subprocess.run([sys.executable, "-c", HOST_MEMORY_CHECK], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    peaks = json.loads(proc.stdout.splitlines()[-1])
    if "reason" in peaks:
        pytest.skip(f"no host peak memory here: {peaks['reason']}")
    assert 60 <= peaks["one"] <= 80, peaks
    assert 185 <= peaks["three"] <= 215, peaks
    assert 30 <= peaks["small"] <= 40, peaks


@pytest.mark.parametrize("argv,message", [
    (["--impls", "nope"], "unknown implementation"),
    (["--impls", "dnmopd:block=3"], "bad option"),
    (["--shapes", "huge"], "unknown"),
])
def test_bad_arguments_exit_2(tmp_path, capsys, argv, message):
    assert _bench_main()(["--device", "cpu", "--out", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err


def test_demo_timing_leaves_each_runs_first_update_out_of_the_medians():
    from dnmopd.benchmarks.demo_updates import DemoTiming, markdown

    native, triton = DemoTiming("native"), DemoTiming("triton")
    runs = {"native": [[9.0, 2.0, 3.0], [8.0, 2.5, 2.0]], "triton": [[30.0, 20.0, 21.0], [25.0, 19.0, 22.0]]}
    for timing in (native, triton):
        for updates in runs[timing.backend]:
            timing.add(DemoTiming(timing.backend, update_s=updates, train_s=[u / 2 for u in updates],
                                  steady=[False, True, True], wall_s=[sum(updates)]))
    assert native.median_update_s == 2.25 and triton.median_update_s == 20.5
    table = markdown([native, triton])
    assert "| triton | 20.50 | 10.25 | 9.11 | 9.11 | (30.00), 20.00, 21.00, (25.00), 19.00, 22.00 |" in table
