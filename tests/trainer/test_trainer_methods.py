"""Three updates of every method on the demo's tiny models, in this process (world size 1)."""

import importlib.util
import math

import pytest
from run_helpers import DEMO, REPO, demo_bank, read_metrics, tiny_overrides

from dnmopd.config import load_config
from dnmopd.trainer.config import TrainerConfig
from dnmopd.trainer.entry import run
from dnmopd.trainer.injection.bank import InjectionBank

METHODS = ["label", "dn_mopd", "single_math", "single_code", "single_if", "uniform_pool", "dynamic_router",
           "observe", "fixed_w", "fixed_math", "fixed_if", "frozen_update0_9b", "frozen_update0_4b",
           "frozen_update0_2b"]
DOMAINS = ("math", "code", "ifeval")


def run_method(models, tmp_path, method_files, extra=()):
    config = load_config(TrainerConfig, [DEMO, *method_files], tiny_overrides(models, tmp_path) + list(extra))
    run(config)
    return config, read_metrics(tmp_path)


@pytest.mark.parametrize("method", METHODS)
def test_three_updates(demo_models, tmp_path, method):
    config, records = run_method(demo_models, tmp_path, [REPO / "configs" / "methods" / f"{method}.yaml"])
    assert [r["step"] for r in records] == [0, 1, 2]
    normalizer = config.method.normalizer
    for record in records:
        assert math.isfinite(record["loss"]) and 0 < record["response_tokens"] <= 48  # 6 x <= 8 tokens
        applied = {d: record[f"dn/{d}/applied"] for d in DOMAINS}  # every domain's multiplier, every update
        if normalizer.multipliers == "observe":
            assert set(applied.values()) <= {1.0}
        elif normalizer.multipliers == "fixed":
            assert applied == pytest.approx({d: normalizer.fixed[d] for d in applied})
        else:
            assert all(0.25 <= w <= 4 for w in applied.values())
    assert (tmp_path / "run" / "checkpoints" / "iter_0000003" / "complete").is_file()


def test_full_vocab_reverse_kl_loss_reports_the_exact_kl(demo_models, tmp_path):
    _, records = run_method(demo_models, tmp_path, [], ["method.loss.kind=full_vocab_reverse_kl"])
    assert all(math.isfinite(record["kl_full/all"]) and record["kl_full/all"] > 0 for record in records)
    both = [record for record in records if "kl_full/ifeval" in record and "kl_full/math" in record]
    assert both and all(record["kl_full/ifeval"] > record["kl_full/math"] > 0 for record in both)


@pytest.mark.parametrize("method", ["uniform_pool", "dynamic_router"])
def test_full_vocab_reverse_kl_to_the_pool_mixture_and_the_dynamic_teacher(demo_models, tmp_path, method):
    _, records = run_method(demo_models, tmp_path, [REPO / "configs" / "methods" / f"{method}.yaml"],
                            ["method.loss.kind=full_vocab_reverse_kl"])
    assert [r["step"] for r in records] == [0, 1, 2]
    for record in records:
        kls = [record[f"kl_full/{d}"] for d in DOMAINS if f"kl_full/{d}" in record]
        assert kls and all(math.isfinite(k) and k > 0 for k in kls) and math.isfinite(record["loss"])


def test_annealed_injection_replaces_one_response_per_covered_group(demo_models, tmp_path):
    bank = demo_bank(demo_models, tmp_path / "bank.pt")
    _, records = run_method(demo_models, tmp_path, [REPO / "configs" / "methods" / "annealed_injection.yaml"],
                            [f"method.injection.bank={bank}", "method.injection.anneal_updates=2"])
    assert [r["injection/constant"] for r in records] == pytest.approx([1.0, 0.5, 0.0])
    assert [r["injection/samples"] for r in records] == [3.0, 3.0, 0.0]  # one per prompt group, none once c = 0


def test_injection_bank_builder_writes_a_checked_bank(demo_models, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("build_injection_bank", REPO / "launch" / "build_injection_bank.py")
    command = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(command)
    overrides = tiny_overrides(demo_models, tmp_path) + [f"method.injection.bank={tmp_path / 'bank.pt'}"]
    args = ["--config", str(DEMO), "--config", str(REPO / "configs" / "methods" / "annealed_injection.yaml"),
            *(arg for override in overrides for arg in ("--set", override)), "--output", str(tmp_path / "bank.pt")]
    assert command.main(args) == 0
    bank = InjectionBank.load(tmp_path / "bank.pt")  # tiny random teachers rarely verify
    written = capsys.readouterr().out.splitlines()[-1]
    assert written == f"wrote {tmp_path / 'bank.pt'}: {len(bank)} entries from 48 prompts"
    (tmp_path / "bank.pt.sha256").write_text("0" * 64 + "  bank.pt\n")
    with pytest.raises(ValueError, match="does not match its checksum"):
        InjectionBank.load(tmp_path / "bank.pt")
