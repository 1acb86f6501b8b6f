"""launch/bench_student.py: the paper's length mix (dnmopd.benchmarks.paper_batch) and the token accounting (no
model), the acceptance bound."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from dnmopd.benchmarks.paper_batch import capped_gamma_mean, gamma_scale_for_capped_mean

SCRIPT = Path(__file__).resolve().parents[2] / "launch" / "bench_student.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_student", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_student"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_capped_gamma_has_the_requested_mean():
    for mean, shape, cap in ((4600, 2.0, 8192), (111, 2.0, 8192), (5200, 1.0, 16384)):
        scale = gamma_scale_for_capped_mean(mean, shape, cap)
        assert capped_gamma_mean(shape, scale, cap) == pytest.approx(mean, rel=1e-9)
        with torch.random.fork_rng():  # the same mean by Monte Carlo
            torch.manual_seed(0)
            draws = torch.distributions.Gamma(torch.tensor(shape), torch.tensor(1 / scale)).sample((200_000,))
        assert draws.clamp(max=cap).mean().item() == pytest.approx(mean, rel=0.01)
    with pytest.raises(ValueError, match="capped mean"):
        gamma_scale_for_capped_mean(9000, 2.0, 8192)


def test_paper_mix_accounting(bench, tmp_path):
    bench.main(["--no-timing", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "bench_student.json").read_text())
    mix = report["mix"]
    assert {d: mix[d]["responses"] for d in ("math", "code", "ifeval")} == {"math": 176, "code": 168, "ifeval": 168}
    assert mix["ifeval"]["token_share"] == pytest.approx(0.011, abs=0.003)  # 9.2: IF is about 1 % of the tokens
    assert mix["response_tokens"] == pytest.approx(1.73e6, rel=0.05)  # 9.2: 1.73 M tokens at 4B, update 0
    assert 0.1 < mix["math"]["cap_rate"] < 0.35 and mix["ifeval"]["cap_rate"] == 0
    rows = {(r["pipeline"], r["layout"]): r for r in report["accounting"]}
    for pipeline in (1, 2, 4):
        packed = rows[pipeline, "packed"]
        assert packed["ratio"] <= 1.01 and packed["largest"] <= 16384  # the acceptance bound
        assert packed["largest"] - packed["smallest"] < 0.05 * 16384  # balanced
    assert rows[1, "padded"]["ratio"] > 1.0 and rows[2, "padded"]["ratio"] > 2.5 and rows[4, "padded"]["ratio"] > 2.5
