"""GRPO teacher training with the real verifiers, and SeqKD-SFT, for two updates on the demo's tiny models."""

import json

import pytest
import torch
from run_helpers import DEMO, read_metrics, tiny_overrides

from dnmopd.config import load_config
from dnmopd.trainer.config import TrainerConfig
from dnmopd.trainer.entry import run
from dnmopd.trainer.modes.sft import load_answers


@pytest.mark.parametrize("pool, domain", [("math", "math"), ("code", "code"), ("if", "ifeval")])
def test_grpo_teacher_run_with_real_verifiers(demo_models, tmp_path, pool, domain):
    overrides = tiny_overrides(demo_models, tmp_path, updates=2) + [
        "run.mode=grpo", f"data.train_file=samples:teacher/{pool}_train.jsonl", "data.samples_per_prompt=4",
        "grpo.max_generation_batches=1", "train.optimizer_steps_per_update=2"]
    run(load_config(TrainerConfig, [DEMO], overrides))
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [0, 1]
    for record in records:
        assert record["grpo/groups_kept"] == 3 and record["grpo/groups_seen"] >= 3
        assert record[f"accuracy/{domain}"] == record["grpo/reward_mean"]  # reward 1 exactly when verified
        assert record[f"no_verdict/{domain}"] == record["grpo/no_verdict"] == 0
        assert record["skipped_steps"] == 0


def test_grpo_advantages_are_group_normalized_rewards(demo_models, tmp_path):
    from dnmopd.trainer.modes.grpo import GRPOMode

    mode = GRPOMode.__new__(GRPOMode)
    mode.config = load_config(TrainerConfig, [DEMO], ["run.mode=grpo", "data.samples_per_prompt=4"])
    mode.grpo = mode.config.grpo

    class FakeSample:
        def __init__(self, verdict, domain="math"):
            self.verdict, self.domain = verdict, domain
            self.response_ids, self.rollout_logp = [5, 6], torch.zeros(2)
            self.prompt = type("P", (), {"prompt_ids": (1, 2, 3), "index": 0})()

    batch = mode._batch([FakeSample(v) for v in (True, False, False, None)])
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    expected = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
    assert batch.advantages[:, 0].double().tolist() == pytest.approx(expected.tolist(), rel=1e-6)
    assert torch.equal(batch.advantages[:, 0], batch.advantages[:, 1])


def test_seqkd_generation_and_sft(demo_models, tmp_path):
    overrides = tiny_overrides(demo_models, tmp_path, updates=2) + ["run.mode=sft", "sft.max_response_tokens=8"]
    run(load_config(TrainerConfig, [DEMO], overrides))
    answers = [json.loads(line) for line in (tmp_path / "run" / "seqkd.jsonl").read_text().splitlines()]
    assert len(answers) == 48 and {a["teacher"] for a in answers} == {"math_teacher", "code_teacher", "ifeval_teacher"}
    assert all(a["teacher"].startswith(a["domain"]) for a in answers)
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [0, 1] and all(r["loss"] > 0 for r in records)
    assert "train_rollout_logprob_abs_diff" not in records[0]


def test_sft_end_token_only_for_finished_answers(tmp_path):
    rows = [{"prompt_ids": [1], "response_ids": [7, 8, 99], "domain": "math", "finish_reason": "stop"},
            {"prompt_ids": [1], "response_ids": [7, 8, 9], "domain": "math", "finish_reason": "length"},
            {"prompt_ids": [1], "response_ids": [7, 8, 9, 10], "domain": "math", "finish_reason": "stop"}]
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = load_answers(path, end_id=99, strip_ids={99, 98}, max_tokens=4)
    assert [r["response_ids"] for r in loaded] == [[7, 8, 99], [7, 8, 9], [7, 8, 9, 10]]
    path.write_text('{"prompt_ids": [1]}\n')
    with pytest.raises(ValueError, match=r"answers.jsonl:1: not a SeqKD answer row"):
        load_answers(path, end_id=99, strip_ids={99}, max_tokens=4)
