"""What rank 0 prints while training and at the end: a table of updates within 80 columns, and the summary."""

from pathlib import Path

import pytest

from dnmopd.trainer.measurements.progress import ProgressDisplay, UpdateTable, elapsed, run_summary

DOMAINS = ["math", "code", "ifeval"]
EVERY_COLUMN = {"loss": 0.1203, "kl/all": -0.0021, "probe_kl/all": 0.11494, "response_length/mean": 31.52,
                "truncation_rate": 0.9583, "throughput/tokens_per_s": 616.9, "dn/math/applied": 1.97,
                "dn/code/applied": 1.15, "dn/ifeval/applied": 0.65, "dn/math/raw_factor": 1.97}


def test_the_table_fits_80_columns_and_says_what_it_shows():
    table = UpdateTable(160, DOMAINS)
    lines = table.header(EVERY_COLUMN) + [table.row(u, 3725.0, EVERY_COLUMN) for u in (0, 159)]
    assert max(len(line) for line in lines) <= 80
    legend = " ".join(lines[:-3])
    for words in ("kl: sampled-token estimate", "probe kl: exact KL on the fixed probe set",
                  "trunc: responses cut at the token cap", "<domain>: DN multiplier w_d"):
        assert words in legend
    assert lines[-3].split() == ["update", "time", "loss", "kl", "probe", "kl", "length", "trunc", *DOMAINS]
    assert lines[-2].split() == ["1/160", "1h02m", "0.1203", "-0.0021", "0.1149", "31.5", "96%", "1.97", "1.15",
                                 "0.65"]
    assert lines[-1].split()[0] == "160/160"


def test_columns_follow_the_first_updates_metrics():
    grpo = {"loss": 0.5, "grpo/reward_mean": 0.25, "response_length/mean": 900.0, "truncation_rate": 0.0}
    table = UpdateTable(3, ["math"])
    assert table.header(grpo)[-1].split() == ["update", "time", "loss", "reward", "length", "trunc"]
    assert table.row(1, 5, {"loss": 0.4}).split() == ["2/3", "5s", "0.4000", "-", "-", "-"]  # absent later: "-"
    full = {"loss": 0.1, "kl/all": 0.2, "kl_full/all": 0.3}  # the exact KL replaces the estimate's column
    assert UpdateTable(3, ["math"]).header(full)[-1].split() == ["update", "time", "loss", "kl", "full"]


@pytest.mark.parametrize("seconds, text", [(0.4, "0s"), (59, "59s"), (61, "1m01s"), (3600, "1h00m"),
                                           (86399, "23h59m")])
def test_elapsed(seconds, text):
    assert elapsed(seconds) == text


def test_a_log_gets_plain_lines(capsys):
    display = ProgressDisplay(2, 0, ["math"], enabled=True, live=False)
    display.phase("train")
    for update in range(2):
        display.finished(update, {"loss": 1.0, "dn/math/applied": 2.0})
    display.close()
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("<domain>: DN multiplier") and out[1].split() == ["update", "time", "loss", "math"]
    assert [line.split()[0] for line in out[2:]] == ["1/2", "2/2"]
    silent = ProgressDisplay(2, 0, ["math"], enabled=False)
    silent.finished(0, {"loss": 1.0})
    assert capsys.readouterr().out == ""


def test_the_summary_names_every_output_and_the_final_numbers():
    run = Path("runs/demo-cpu")
    metrics = {"loss": 0.1, "probe_kl/all": 0.0912, "probe_kl/math": 0.0223, "eval/aime25": 3.33,
               "eval/heldout": 50.0, "eval/heldout/math": 40.0, "time/eval": 9.0}
    text = run_summary(run, 30, 125.0, metrics, checkpoints=[run / "checkpoints" / "iter_0000030"],
                       release=run / "release", plots=[run / "plots" / "probe_kl.png", run / "plots" / "timeline.png"])
    assert text.splitlines() == [
        "done: 30 updates in 2m05s; outputs in runs/demo-cpu/",
        "  checkpoint  runs/demo-cpu/checkpoints/iter_0000030",
        "  release     runs/demo-cpu/release",
        "  plots       runs/demo-cpu/plots/ (probe_kl, timeline)",
        "  metrics     runs/demo-cpu/metrics.jsonl, runs/demo-cpu/tensorboard/",
        "  probe kl    all 0.0912, math 0.0223",
        "  eval        aime25 3.33, heldout 50.00"]
    finished = run_summary(run, 0, 1.0, {}, checkpoints=[], release=None, plots=None)
    assert finished.splitlines()[0] == "done: the run had finished already; outputs in runs/demo-cpu/"
