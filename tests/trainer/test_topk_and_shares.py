"""One-update runs of the new method pieces on the demo's tiny models (world size 1, in-process teachers): the
token_share preset applies the rule it measures, every OPD run logs the domain shares, and the top-k loss over
the whole vocabulary (k = V = 1,024) reports the full-vocabulary loss's exact KL on the same batch."""

import math

import pytest
from run_helpers import DEMO, REPO, read_metrics, tiny_overrides

from dnmopd.config import load_config
from dnmopd.trainer.config import TrainerConfig
from dnmopd.trainer.entry import run

DOMAINS = ("math", "code", "ifeval")


def one_update(models, run_dir, files=(), extra=()):
    config = load_config(TrainerConfig, [DEMO, *files], tiny_overrides(models, run_dir, updates=1) + list(extra))
    run(config)
    return read_metrics(run_dir)[0]


def test_token_share_applies_its_measured_ratio_and_shares_add_up(demo_models, tmp_path):
    record = one_update(demo_models, tmp_path, [REPO / "configs" / "methods" / "token_share.yaml"])
    present = [d for d in DOMAINS if f"share/tokens/{d}" in record]
    assert present
    for domain in present:
        assert record[f"dn/{domain}/applied"] == record[f"dn/{domain}/share_factor"]
        assert 0.25 <= record[f"dn/{domain}/applied"] <= 4.0
    for name in ("tokens", "advantage", "gradient"):
        assert sum(record[f"share/{name}/{d}"] for d in present) == pytest.approx(1.0)
    assert math.isfinite(record["loss"])


def test_topk_over_the_whole_vocabulary_reports_the_exact_kl(demo_models, tmp_path):
    topk = one_update(demo_models, tmp_path / "topk", extra=["method.loss.kind=topk_reverse_kl",
                                                             "method.loss.topk=1024"])
    full = one_update(demo_models, tmp_path / "full", extra=["method.loss.kind=full_vocab_reverse_kl"])
    assert topk["response_tokens"] == full["response_tokens"]  # the same batch: same seeds, same weights
    for domain in [d for d in DOMAINS if f"kl_full/{d}" in full]:
        assert topk[f"kl_topk/{domain}"] == pytest.approx(full[f"kl_full/{domain}"], rel=1e-4)
        assert topk[f"topk_mass/student/{domain}"] == pytest.approx(1.0, abs=1e-5)
    assert topk["loss"] == pytest.approx(full["loss"], rel=1e-4)


def test_topk_with_few_candidates_is_below_the_exact_kl(demo_models, tmp_path):
    topk = one_update(demo_models, tmp_path / "topk", extra=["method.loss.kind=topk_reverse_kl",
                                                             "method.loss.topk=4"])
    full = one_update(demo_models, tmp_path / "full", extra=["method.loss.kind=full_vocab_reverse_kl"])
    for domain in [d for d in DOMAINS if f"kl_full/{d}" in full]:
        assert 0 < topk[f"kl_topk/{domain}"] <= full[f"kl_full/{domain}"]
        assert 0 < topk[f"topk_mass/teacher/{domain}"] < 1
