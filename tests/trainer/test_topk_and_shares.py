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


@pytest.mark.parametrize("extra, message", [
    (["method.loss.topk=1025"], r"method.loss.topk: 1025 is more than the vocabulary of .* \(1024\)"),
    (["method.routing.rule=pool", "method.routing.label_map={}"], r"method.routing.rule: pool routing's target"),
    (["method.loss.topk=0"], r"loss.topk must be >= 1"),
    (["train.optimizer_steps_per_update=2"], r"topk_reverse_kl supports one optimizer step per update"),
    ([f"method.injection={{bank: {REPO / 'missing.pt'}}}", "rollout.verify=true",
      "method.normalizer.multipliers=observe"],
     r"injection .* topk_reverse_kl loss does not take"),
])
def test_topk_config_errors_name_the_key(demo_models, tmp_path, extra, message):
    from dnmopd.config import ConfigError

    overrides = tiny_overrides(demo_models, tmp_path) + ["method.loss.kind=topk_reverse_kl", *extra]
    with pytest.raises(ConfigError, match=message):
        load_config(TrainerConfig, [DEMO], overrides)


def test_topk_refuses_teachers_without_any_top_k(demo_models, tmp_path):
    from dnmopd.config import ConfigError

    served = (f"{{backend: vllm, name: math_teacher, model_path: {demo_models / 'math_teacher'}, "
              "pool: {urls: ['http://127.0.0.1:9']}}")
    local = ", ".join(f"{{backend: inprocess, name: {d}_teacher, model_path: {demo_models / f'{d}_teacher'}}}"
                      for d in ("code", "ifeval"))
    overrides = tiny_overrides(demo_models, tmp_path) + ["method.loss.kind=topk_reverse_kl",
                                                        f"teachers.models=[{served}, {local}]"]
    with pytest.raises(ConfigError, match=r"method.loss.kind: topk_reverse_kl needs teachers .* \['math_teacher'\]"):
        load_config(TrainerConfig, [DEMO], overrides)
