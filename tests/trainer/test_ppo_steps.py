"""Several optimizer steps per rollout at a sampling temperature != 1, against a float64 loop of two PPO steps.

The trainer runs one OPD update of the demo student with `train.optimizer_steps_per_update: 2` (plain SGD, so
the weight change of each step is lr times its gradient) at temperature 0.8. The reference recomputes, in
float64 with the Hugging Face model of the same weights: the old log-probs once before the first step (at
temperature 0.8), A = log p_teacher - old, then per step the clipped surrogate on its half of the batch
with ratio exp(logp - old). The second step's ratio leaves 1 (the clip binds), so a trainer that took the
ratio against each step's own weights, or used untempered log-probs, would move the weights differently.
"""

import pytest
import torch
from run_helpers import DEMO, REPO, tiny_overrides

from dnmopd.config import load_config
from dnmopd.student.cpu_compat import cpu_compat
from dnmopd.trainer.config import TrainerConfig
from dnmopd.trainer.modes.opd import OPDMode
from dnmopd.trainer.trainer import Trainer

LR, TEMPERATURE, EPS = 20.0, 0.8, 0.2


def float64_ppo_steps(model, batch, steps: int) -> tuple[dict[str, torch.Tensor], float]:
    """SGD on the clipped surrogate, old log-probs from before the first step; returns the new parameters and
    the share of step-2 tokens whose ratio left [1 - eps, 1 + eps]."""
    mask = batch["loss_mask"].double()

    def logp(rows):
        """[b, T] log-probs of the response tokens of `rows` at the sampling temperature."""
        tokens, prompt_lens = batch["tokens"][rows], batch["prompt_lens"][rows]
        logprobs = torch.log_softmax(model(input_ids=tokens).logits.double() / TEMPERATURE, dim=-1)
        positions = (prompt_lens[:, None] + torch.arange(mask.shape[1])[None, :]).clamp(max=tokens.shape[1] - 1)
        predicted = logprobs[torch.arange(tokens.shape[0])[:, None], positions - 1]
        return predicted.gather(2, tokens.gather(1, positions)[..., None]).squeeze(-1)

    size = batch["tokens"].shape[0]
    with torch.no_grad():
        old = logp(slice(0, size))
    advantages = (batch["target_logp"].double() - old) * mask
    rows_per_step = size // steps
    clipped = 0.0
    for step in range(steps):
        rows = slice(step * rows_per_step, (step + 1) * rows_per_step)
        ratio = torch.exp(logp(rows) - old[rows])
        a, m = advantages[rows], mask[rows]
        pg = torch.maximum(-ratio * a, -ratio.clamp(1 - EPS, 1 + EPS) * a)
        loss = ((pg * m).sum(1) / m.sum(1).clamp(min=1)).sum() / rows_per_step
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for parameter in model.parameters():
                if parameter.grad is not None:
                    parameter -= LR * parameter.grad
        if step == 1:
            outside = ((ratio < 1 - EPS) | (ratio > 1 + EPS)) & (m > 0)
            clipped = float(outside.sum() / m.sum())
    return {name: p.detach().clone() for name, p in model.named_parameters()}, clipped


@pytest.mark.slow
def test_two_ppo_steps_equal_a_float64_loop(demo_models, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    overrides = tiny_overrides(demo_models, tmp_path, updates=1) + [
        "method.loss.kind=sampled_token", "train.optimizer_steps_per_update=2", "optimizer.name=sgd",
        "optimizer.sgd_momentum=0", "optimizer.weight_decay=0", "optimizer.clip_grad=0", f"optimizer.lr={LR}",
        f"rollout.sampling.temperature={TEMPERATURE}", "checkpoint.save_every=5"]
    config = load_config(TrainerConfig, [DEMO, REPO / "configs" / "methods" / "label.yaml"], overrides)
    seen = {}
    prepare = OPDMode.prepare

    def spy(self, batch, update, staleness):
        seen["batch"] = {"tokens": batch.tokens.clone(), "prompt_lens": batch.prompt_lens.clone(),
                         "loss_mask": batch.loss_mask.clone(), "target_logp": batch.target_logp.clone(),
                         "rollout_logp": batch.rollout_logp.clone()}
        metrics = prepare(self, batch, update, staleness)
        seen["old_logp"] = batch.old_logp.clone()
        return metrics

    monkeypatch.setattr(OPDMode, "prepare", spy)
    with cpu_compat():
        trainer = Trainer(config)
        try:
            before = {name: t.detach().double().clone() for name, t in trainer.student.hf_tensors(causal_lm_names=True)}
            trainer.train()
            after = {name: t.detach().double().clone() for name, t in trainer.student.hf_tensors(causal_lm_names=True)}
        finally:
            trainer.close()

    batch = seen["batch"]
    mask = batch["loss_mask"]
    # the trainer's old log-probs are the rollout's tempered distribution at the same weights
    torch.testing.assert_close(seen["old_logp"][mask], batch["rollout_logp"][mask], atol=2e-5, rtol=0)

    model = AutoModelForCausalLM.from_pretrained(demo_models / "student", dtype=torch.float64).eval()
    model.load_state_dict(before, strict=False)
    reference, clipped = float64_ppo_steps(model, batch, steps=2)
    assert clipped > 0.05, "the second step's ratio should leave the clip range"
    for name, new in after.items():
        delta, want = new - before[name], reference[name] - before[name]
        scale = want.abs().max().item()
        assert (delta - want).abs().max().item() <= 2e-3 * scale + 1e-6, name
