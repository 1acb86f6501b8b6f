"""The toy bigram DN-MOPD loop: every mode runs, and 30 dn steps distil with math > 1 > ifeval."""

import math
import subprocess
import sys

import pytest

from dnmopd.examples.toy import DOMAINS, ToyConfig, train


@pytest.mark.parametrize("mode", ["dn", "observe", "frozen"])
def test_three_steps_in_every_mode(mode):
    history = train(ToyConfig(mode=mode, steps=3), log=lambda _: None)
    for record in history:
        assert math.isfinite(record["loss"]) and all(math.isfinite(v) for v in record["kl"].values())
        assert all(0.25 <= record["factor"][d] <= 4 for d in DOMAINS)
    applied = [record["w"] for record in history]
    if mode == "observe":
        assert all(w == {d: 1.0 for d in DOMAINS} for w in applied)
    elif mode == "frozen":
        assert applied[0] == applied[1] == applied[2]
    else:
        assert applied == [record["factor"] for record in history]


def test_thirty_dn_steps_reduce_reverse_kl_and_rank_the_domains():
    history = train(ToyConfig(mode="dn", steps=30), log=lambda _: None)
    start, end = (sum(h["kl"].values()) for h in (history[0], history[-1]))
    assert end < start
    for record in history:
        assert record["w"]["math"] > 1 > record["w"]["ifeval"]


def test_command_line_prints_the_per_step_table():
    out = subprocess.run([sys.executable, "-m", "dnmopd.examples.toy", "--steps", "2", "--mode", "frozen"],
                         capture_output=True, text=True, check=True).stdout
    assert "w/math" in out and "KL/ifeval" in out and "reverse KL (mean over domains)" in out
