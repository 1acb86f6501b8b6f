"""Named metrics: each name's declared reduction over data-parallel ranks (2 gloo processes), undeclared names
refused, and the modes' tables documented in docs/metrics.md."""

import importlib.util
import math

import pytest
from distributed import run_workers
from run_helpers import REPO

from dnmopd.trainer.measurements.metric_table import Mean, MetricTable, reduce_metrics

TABLE = MetricTable(
    ("tokens", "sum", "count"),
    ("length/mean", "mean", "token mean"),
    ("accuracy/{domain}", "mean", "per domain"),
    ("slowest", "max", "seconds"),
    ("first/{phase}/start", "min", "a start"),
    ("w", "global", "the same everywhere"),
)
RANKS = [  # rank 1 has no ifeval response, rank 0 no code one
    {"tokens": 10.0, "length/mean": Mean(10.0, 2.0), "accuracy/math": Mean(1.0, 2.0), "accuracy/ifeval": Mean(0, 0),
     "slowest": 3.0, "first/rollout/start": 100.5, "w": 0.25},
    {"tokens": 30.0, "length/mean": Mean(30.0, 4.0), "accuracy/math": Mean(3.0, 3.0), "accuracy/code": Mean(0.0, 1.0),
     "slowest": 7.5, "first/rollout/start": 99.0, "w": 0.25},
]


def _reduce(rank, world):
    import torch.distributed as dist

    return reduce_metrics(RANKS[rank], TABLE, dist.group.WORLD)


def test_metrics_reduce_by_name_over_ranks():
    expected = {"tokens": 40.0, "length/mean": 40.0 / 6.0, "accuracy/math": 4.0 / 5.0, "accuracy/code": 0.0,
                "slowest": 7.5, "first/rollout/start": 99.0, "w": 0.25}  # accuracy/ifeval: no response anywhere
    for reduced in run_workers(2, _reduce):
        assert reduced.keys() == expected.keys()
        for key, value in expected.items():
            assert math.isclose(reduced[key], value, rel_tol=1e-12), key


def test_single_process_and_refusals():
    assert reduce_metrics({"tokens": 3.0, "length/mean": Mean(6.0, 3.0)}, TABLE) == {"tokens": 3.0,
                                                                                    "length/mean": 2.0}
    with pytest.raises(KeyError, match="'typo' is not declared"):
        reduce_metrics({"typo": 1.0}, TABLE)
    with pytest.raises(TypeError, match=r"length/mean.*Mean\(total, count\)"):
        reduce_metrics({"length/mean": 2.0}, TABLE)
    with pytest.raises(TypeError, match="tokens"):
        reduce_metrics({"tokens": Mean(1.0, 1.0)}, TABLE)
    with pytest.raises(ValueError, match="reduce must be one of"):
        MetricTable(("x", "median", "?"))


def test_placeholders_stand_for_one_path_component():
    assert TABLE.spec("accuracy/math").name == "accuracy/{domain}"
    with pytest.raises(KeyError):
        TABLE.spec("accuracy/math/extra")


def test_metrics_reference_is_current():
    spec = importlib.util.spec_from_file_location("gen_metrics", REPO / "docs" / "gen_metrics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, "run python docs/gen_metrics.py"
