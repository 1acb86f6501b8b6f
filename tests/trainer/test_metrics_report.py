"""Metrics JSONL/TensorBoard logging, resume truncation, and the PNG report."""

import json

import pytest
from PIL import Image

from dnmopd.trainer.measurements.metrics import MetricsLogger, read_metrics
from dnmopd.trainer.measurements.report import draw_report, main


def fake_run(run_dir, updates=6, resume_step=0):
    logger = MetricsLogger(MetricsLogger.Config(), run_dir, resume_step=resume_step)
    for step in range(resume_step, updates):
        logger.log(step, {
            "loss": 1.0 / (step + 1), "response_length/mean": 10.0 + step, "throughput/tokens_per_s": 100.0,
            "dn/math/applied": 2.0, "dn/math/raw_factor": 2.1, "dn/ifeval/applied": 0.25, "dn/ifeval/raw_factor": 0.2,
            "kl/math": 0.5 - 0.05 * step, "kl/ifeval": 1.0 - 0.1 * step, "time/rollout": 1.5, "time/train": 0.5,
            # train.rollout_ahead 1: each batch is generated while the previous one trains
            "timeline/rollout/start": 10.0 + 2 * step, "timeline/rollout/end": 11.5 + 2 * step,
            "timeline/train/start": 12.0 + 2 * step, "timeline/train/end": 12.5 + 2 * step,
        })
    logger.close()


def test_jsonl_and_tensorboard(tmp_path):
    fake_run(tmp_path)
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(6)) and records[2]["kl/math"] == pytest.approx(0.4)
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_resume_drops_records_after_the_checkpoint_and_torn_lines(tmp_path):
    fake_run(tmp_path)
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 6, "lo')  # killed mid-write
    fake_run(tmp_path, updates=8, resume_step=4)
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == list(range(8))


def test_a_corrupt_line_in_the_middle_is_an_error(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\nnot json\n{"step": 1}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2"):
        read_metrics(tmp_path / "metrics.jsonl")


def test_report_draws_every_plot(tmp_path, capsys):
    fake_run(tmp_path)
    main([str(tmp_path)])
    names = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert names == ["multipliers.png", "phase_times.png", "reverse_kl.png", "timeline.png", "training.png"]
    for name in names:
        with Image.open(tmp_path / "plots" / name) as image:
            assert image.size[0] > 300 and image.size[1] > 200
    assert "multipliers.png" in capsys.readouterr().out


def test_report_needs_a_run_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="is .* a run directory"):
        draw_report(tmp_path)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0, "loss": 1.0}) + "\n")
    assert [p.name for p in draw_report(tmp_path)] == ["training.png"]
