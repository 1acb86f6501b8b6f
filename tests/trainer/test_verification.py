"""A verifier that times out, crashes or raises never stops a run: the verdict is None (logged, counted as
no_verdict/<domain>) and scored as wrong in every mode; `verifiers.on_no_verdict: stop` stops instead."""

import json
import logging

import pytest
from run_helpers import DEMO, REPO, demo_bank, read_metrics, tiny_overrides

from dnmopd.config import load_config
from dnmopd.trainer.config import TrainerConfig
from dnmopd.trainer.entry import run
from dnmopd.trainer.experience.verification import Verification, VerificationError
from dnmopd.verifiers.math import MathVerifier

CODE_LABEL = json.dumps({"inputs": ["2 3\n"], "outputs": ["5\n"]})
ADD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def test_real_verifier_failures_are_missing_verdicts(caplog):
    config = Verification.Config(math=MathVerifier.Config(workers=1, timeout_s=3))
    verification = Verification(config, ["math", "code", "ifeval"])
    try:
        with caplog.at_level(logging.WARNING, logger="dnmopd.trainer.experience.verification"):
            assert verification.verdict("math", r"\boxed{9^{9^{9^{9}}}}", "1") is None  # the grader times out
            assert verification.verdict("code", ADD, '{"inputs": [1]}') is None  # the judge raises on the label
            assert verification.verdict("ifeval", "x", '[{"type": "word_count_min"}]') is None  # so do checkers
        assert dict(verification.failures) == {"math": 1, "code": 1, "ifeval": 1}
        assert "raised ValueError" in caplog.text and "no code verdict" in caplog.text
        # the verifiers still work after each failure
        assert verification.verdict("math", r"\boxed{4}", "4") is True
        assert verification.verdict("code", ADD, CODE_LABEL) is True
        assert verification.verdict("ifeval", "HI", '[{"type": "all_caps"}]') is True
        assert verification.verdict("ifeval", "hi", '[{"type": "all_caps"}]') is False
    finally:
        verification.close()


def test_stop_policy_raises_with_the_cause():
    verification = Verification(Verification.Config(on_no_verdict="stop"), ["ifeval"])
    with pytest.raises(VerificationError, match=r"no ifeval verdict: the verifier raised .*on_no_verdict=stop"):
        verification.verdict("ifeval", "x", "not json")
    verification.close()
    with pytest.raises(ValueError, match="verifiers.on_no_verdict must be one of"):
        Verification.Config(on_no_verdict="zero")


def test_the_verifiers_section_selects_the_rules_the_run_grades_by():
    """The GRPO teachers' recipe grades by the paper's rules: `1e3` is 1000 there, not under math-verify."""
    paper = load_config(TrainerConfig, [REPO / "configs/recipes/teacher_grpo.yaml",
                                        REPO / "configs/models/qwen3.5-4b.yaml"], ["verifiers.math.workers=1"])
    assert paper.verifiers.math.rules == "paper"
    default = Verification.Config(math=MathVerifier.Config(workers=1))
    for config, expected in ((paper.verifiers, True), (default, False)):
        verification = Verification(config, ["math"])
        try:
            assert verification.verdict("math", r"so \boxed{1e3}", "1000") is expected
        finally:
            verification.close()

@pytest.fixture
def flaky_if_checker(monkeypatch):
    """The IF checker raises on every other response it is given (as a checker bug would)."""
    from dnmopd.verifiers import ifeval

    real, calls = ifeval.IfVerifier.verify, []

    def flaky(self, response, label):
        calls.append(response)
        if len(calls) % 2:
            raise RuntimeError("checker bug")
        return real(self, response, label)

    monkeypatch.setattr(ifeval.IfVerifier, "verify", flaky)
    return calls


def test_grpo_scores_a_raising_verifier_as_wrong(demo_models, tmp_path, flaky_if_checker):
    overrides = tiny_overrides(demo_models, tmp_path, updates=2) + [
        "run.mode=grpo", "data.train_file=samples:teacher/if_train.jsonl", "data.samples_per_prompt=4",
        "grpo.max_generation_batches=1"]
    run(load_config(TrainerConfig, [DEMO], overrides))
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [0, 1]
    for record in records:
        responses = record["grpo/groups_kept"] * 4
        assert record["no_verdict/ifeval"] == record["grpo/no_verdict"] >= responses / 2
        assert record["accuracy/ifeval"] == record["grpo/reward_mean"] <= 0.5  # no verdict: reward 0, not correct
    assert len(flaky_if_checker) >= 2 * 12


def test_annealed_injection_treats_a_missing_verdict_as_wrong(demo_models, tmp_path, monkeypatch):
    from dnmopd.verifiers import ifeval, math

    def broken(*args):
        raise RuntimeError("checker bug")

    monkeypatch.setattr(ifeval.IfVerifier, "verify", broken)
    monkeypatch.setattr(math.MathVerifier, "verify", broken)
    bank = demo_bank(demo_models, tmp_path / "bank.pt")
    config = load_config(TrainerConfig, [DEMO, REPO / "configs" / "methods" / "annealed_injection.yaml"],
                         tiny_overrides(demo_models, tmp_path, updates=2) + [f"method.injection.bank={bank}"])
    run(config)
    records = read_metrics(tmp_path)
    assert [r["injection/samples"] for r in records] == [3.0, 3.0]  # one per group, chosen as if wrong
    for record in records:
        verified = [d for d in ("math", "ifeval") if f"no_verdict/{d}" in record]
        assert verified and all(record[f"no_verdict/{d}"] > 0 and record[f"accuracy/{d}"] < 1 for d in verified)
