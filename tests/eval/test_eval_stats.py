"""The paired bootstrap against an independent computation, and the compare command."""

import json

import numpy as np
import pytest

from dnmopd.eval.bootstrap import compare, contrast
from dnmopd.eval.protocol import SIX, SUITES


def fixed_scores(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {s: {f"{s}:{q}": float(rng.integers(0, 5)) / 4 for q in range(SUITES[s].questions // 10 + 3)} for s in SIX}


def independent_total(a, b, replicates):
    """The protocol's definition, written out with plain loops."""
    rng = np.random.default_rng(20260923)
    total = np.zeros(replicates)
    for suite in SIX:
        ids = sorted(a[suite])
        draws = rng.integers(0, len(ids), size=(replicates, len(ids)))
        for r in range(replicates):
            picked = [ids[k] for k in draws[r]]
            total[r] += 100 * (np.mean([a[suite][i] for i in picked]) - np.mean([b[suite][i] for i in picked])) / 6
    return total


def test_a_model_against_itself_gives_all_zero_replicates():
    a = fixed_scores(1)
    for c in compare(a, a, replicates=500):
        assert c.delta == 0 and not c.replicates.any() and c.low == c.high == 0


def test_total_matches_an_independent_bootstrap():
    a, b = fixed_scores(1), fixed_scores(2)
    got = contrast("total", SIX, a, b, replicates=300)
    want = independent_total(a, b, 300)
    np.testing.assert_allclose(got.replicates, want, rtol=0, atol=1e-9)
    assert got.low == pytest.approx(np.percentile(want, 2.5)) and got.high == pytest.approx(np.percentile(want, 97.5))
    point = np.mean([100 * (np.mean(list(a[s].values())) - np.mean(list(b[s].values()))) for s in SIX])
    assert got.delta == pytest.approx(point)


def test_every_contrast_starts_a_fresh_generator():
    a, b = fixed_scores(3), fixed_scores(4)
    contrasts = {c.name: c for c in compare(a, b, replicates=200)}
    assert list(contrasts) == [*SIX, "math", "code", "if", "total"]
    alone = contrast("lcb_v5", ["lcb_v5"], a, b, replicates=200)
    np.testing.assert_array_equal(contrasts["lcb_v5"].replicates, alone.replicates)


def test_different_questions_are_refused():
    a, b = fixed_scores(1), fixed_scores(1)
    b["aime25"].pop(next(iter(b["aime25"])))
    with pytest.raises(ValueError, match="different questions"):
        contrast("aime25", ["aime25"], a, b, replicates=10)


def test_compare_command(tmp_path, capsys):
    from launch_evaluate import main

    for name, seed in (("a", 1), ("b", 2)):
        for suite, scores in fixed_scores(seed).items():
            folder = tmp_path / name / suite / "cap16384"
            folder.mkdir(parents=True)
            lines = [json.dumps({"id": q, "input_sha256": "0" * 64, "n": 4,
                                 "correct": "1" * int(4 * v) + "0" * (4 - int(4 * v)), "mean_tokens": 1.0,
                                 "cap_hits": 0}) for q, v in scores.items()]
            (folder / "records.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--replicates", "300"]) == 0
    out = capsys.readouterr().out
    want = contrast("total", SIX, fixed_scores(1), fixed_scores(2), replicates=300)
    assert f"{want.delta:+.2f}" in out and "total" in out and "lcb_v6" in out
