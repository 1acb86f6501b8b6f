"""The clipped OPD loss: response-mean reduction, shard additivity, clipping on both sides, dual clip,
and how DN scaling interacts with it."""

import math

import pytest
import torch
from dn_batches import DOMAINS, make_batch
from dn_oracle import token_loss

from dnmopd.core import (
    DomainNormalizer,
    clipped_opd_loss,
    clipped_opd_loss_batched,
    clipped_surrogate,
    reverse_kl_advantages,
    scale_advantages_batched,
    sft_loss,
)


def one_token(log_ratio, advantage, **clip):
    logp = torch.tensor([[log_ratio]], dtype=torch.float64, requires_grad=True)
    loss = clipped_opd_loss_batched(logp, torch.zeros(1, 1, dtype=torch.float64),
                                    torch.tensor([[advantage]], dtype=torch.float64), torch.ones(1, 1), **clip)
    loss.backward()
    return loss.item(), logp.grad.item()


def test_every_response_weighs_the_same():
    logp = [torch.zeros(100), torch.zeros(1)]
    loss = clipped_opd_loss(logp, [x.clone() for x in logp], [torch.ones(100), torch.full((1,), 3.0)])
    assert loss.item() == pytest.approx(-2.0)


def test_num_responses_makes_shard_losses_add_up():
    g = torch.Generator().manual_seed(0)
    old = torch.randn(8, 5, generator=g)
    logp = old + 0.1 * torch.randn(8, 5, generator=g)
    adv = torch.randn(8, 5, generator=g)
    mask = torch.rand(8, 5, generator=g) > 0.3
    full = clipped_opd_loss_batched(logp, old, adv, mask)
    shards = sum(clipped_opd_loss_batched(logp[s], old[s], adv[s], mask[s], num_responses=8)
                 for s in (slice(0, 3), slice(3, 8)))
    assert shards.item() == pytest.approx(full.item(), rel=1e-6)
    rows = [[x[i][mask[i]] for i in range(8)] for x in (logp, old, adv)]
    listed = sum(clipped_opd_loss(*(r[s] for r in rows), num_responses=8) for s in (slice(0, 5), slice(5, 8)))
    assert listed.item() == pytest.approx(full.item(), rel=1e-6)


@pytest.mark.parametrize(
    "log_ratio, advantage, clipped",
    [(0.5, 1.0, True), (-0.5, 1.0, False), (-0.5, -1.0, True), (0.5, -1.0, False), (0.1, 2.0, False),
     (-0.1, -2.0, False)],
)
def test_ppo_clipping_cases(log_ratio, advantage, clipped):
    loss, grad = one_token(log_ratio, advantage)
    ratio = math.exp(log_ratio)
    if clipped:
        bound = 1.2 if advantage > 0 else 0.8
        assert loss == pytest.approx(-bound * advantage) and grad == 0.0
    else:
        assert loss == pytest.approx(-ratio * advantage) and grad == pytest.approx(-advantage * ratio)
    assert (loss, grad) == pytest.approx(token_loss(log_ratio, advantage))


def test_asymmetric_clip():
    log_ratio = 0.24  # ratio 1.271
    assert one_token(log_ratio, 1.0, eps_high=0.2)[1] == 0.0
    assert one_token(log_ratio, 1.0, eps_high=0.28)[1] == pytest.approx(-math.exp(0.24))


def test_dual_clip_caps_negative_advantages():
    loss, grad = one_token(2.0, -1.0, dual_clip=3.0)  # ratio 7.39: -ratio * A = 7.39 > 3
    assert loss == pytest.approx(3.0) and grad == 0.0
    assert (loss, grad) == pytest.approx(token_loss(2.0, -1.0, dual_clip=3.0))
    assert one_token(0.5, -1.0, dual_clip=3.0)[0] == pytest.approx(math.exp(0.5))
    assert one_token(2.0, 1.0, dual_clip=3.0)[0] == pytest.approx(-1.2)


def test_clip_flags():
    _, flags = clipped_surrogate(torch.tensor([0.5, -0.5, 0.0]), torch.tensor([1.0, 1.0, 1.0]))
    assert flags.tolist() == [True, False, False]


@pytest.mark.parametrize("kwargs", [{"eps_low": 1.0}, {"eps_low": -0.1}, {"eps_high": -0.1}, {"dual_clip": 1.0}])
def test_invalid_clip_parameters(kwargs):
    with pytest.raises(ValueError):
        one_token(0.0, 1.0, **kwargs)


def test_batched_loss_errors():
    with pytest.raises(ValueError, match="mask shape"):
        clipped_opd_loss_batched(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 2))
    with pytest.raises(ValueError, match="non-empty"):
        clipped_opd_loss_batched(*(torch.zeros(0, 3),) * 4)
    with pytest.raises(ValueError, match="equal, non-zero"):
        clipped_opd_loss([], [], [])


def dn_and_label_losses(seed):
    g = torch.Generator().manual_seed(seed)
    log_ratio, mask, ids = make_batch(seed)
    teacher = torch.randn(mask.shape, generator=g)
    old = torch.randn(mask.shape, generator=g)
    advantages = reverse_kl_advantages(teacher, old, mask)
    weights, _ = DomainNormalizer(DOMAINS).multipliers_batched(log_ratio, mask, ids)
    scaled = scale_advantages_batched(advantages, ids, weights)
    grads = []
    for adv in (advantages, scaled):
        logp = old.clone().requires_grad_()
        clipped_opd_loss_batched(logp, old, adv, mask).backward()
        grads.append(logp.grad)
    return advantages, scaled, weights, ids, mask, grads


def test_dn_scaling_preserves_signs_of_advantages_and_gradients():
    advantages, scaled, _, _, mask, (label_grad, dn_grad) = dn_and_label_losses(1)
    assert torch.equal(torch.sign(advantages), torch.sign(scaled))
    nonzero = label_grad != 0
    assert torch.equal(torch.sign(label_grad[nonzero]), torch.sign(dn_grad[nonzero]))
    assert torch.equal(dn_grad[~mask], torch.zeros_like(dn_grad[~mask]))


def test_dn_gradient_is_the_label_gradient_scaled_per_domain():
    _, _, weights, ids, _, (label_grad, dn_grad) = dn_and_label_losses(2)
    assert torch.allclose(dn_grad, label_grad * weights[ids][:, None], rtol=1e-6, atol=1e-9)


def test_observe_weights_leave_the_loss_identical_to_label():
    g = torch.Generator().manual_seed(3)
    log_ratio, mask, ids = make_batch(3)
    adv = reverse_kl_advantages(torch.randn(mask.shape, generator=g), torch.zeros(mask.shape), mask)
    weights, _ = DomainNormalizer(DOMAINS, mode="observe").multipliers_batched(log_ratio, mask, ids)
    observed = clipped_opd_loss_batched(torch.zeros(mask.shape), torch.zeros(mask.shape),
                                        scale_advantages_batched(adv, ids, weights), mask)
    label = clipped_opd_loss_batched(torch.zeros(mask.shape), torch.zeros(mask.shape), adv, mask)
    assert torch.equal(observed, label)


def test_sft_loss_is_a_token_mean_over_the_batch():
    logp = torch.tensor([[-1.0, -2.0, float("nan")], [-3.0, float("nan"), float("nan")]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert sft_loss(logp, mask).item() == pytest.approx(2.0)
    assert sft_loss(logp, mask, num_tokens=6).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least one valid token"):
        sft_loss(logp, torch.zeros_like(mask))
