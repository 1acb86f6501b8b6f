"""launch/bench_kernels.py on the CPU shapes: every provider that runs on CPU reports, GPU ones are skipped."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "launch" / "bench_kernels.py"


def _bench_main():
    spec = importlib.util.spec_from_file_location("bench_kernels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_cpu_quick_run_writes_reports(tmp_path, capsys):
    impls = "floor,floor_chunked,dnmopd,dnmopd:chunk_rows=40,torch,liger,cce"
    code = _bench_main()(["--device", "cpu", "--quick", "--repeats", "1", "--impls", impls, "--out", str(tmp_path)])
    assert code == 0
    report = json.loads((tmp_path / "bench_kernels.json").read_text())
    rows = {(r["shape"], r["impl"]): r for r in report["results"]}
    assert {s for s, _ in rows} == {"tiny-tp1", "tiny-tp2"}
    for shape in ("tiny-tp1", "tiny-tp2"):
        assert rows[(shape, "floor")]["ratio_to_floor"] == 1.0
        for impl in ("dnmopd", "dnmopd[chunk_rows=40]", "torch"):
            row = rows[(shape, impl)]
            assert row["status"] == "ok" and row["median_ms"] > 0, row
            assert row["grad_hidden_rel_err"] < 1e-5 and row["grad_weight_rel_err"] < 1e-5, row
        for impl in ("liger", "cce"):
            assert rows[(shape, impl)]["status"] == "skipped"
            assert "CUDA" in rows[(shape, impl)]["reason"]
    table = (tmp_path / "bench_kernels.md").read_text()
    assert "| tiny-tp1 (96x32x1000) | dnmopd |" in table
    assert "skipped: needs a CUDA device" in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["--impls", "nope"], "unknown implementation"),
    (["--impls", "dnmopd:block=3"], "bad option"),
    (["--shapes", "huge"], "unknown"),
])
def test_bad_arguments_exit_2(tmp_path, capsys, argv, message):
    assert _bench_main()(["--device", "cpu", "--out", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err
