"""fused_opd_loss against the float64 clipped OPD loss over materialised logits and hand-computed clipping
cases, on both backends: response-mean reduction, shard additivity, PPO and dual clipping, DN multipliers."""

import math

import pytest
import torch
from kernel_reference import DEVICE, leaf64, logprob_entropy, opd_loss, random_head, rel_err

from dnmopd.core import DomainNormalizer
from dnmopd.kernels import domain_stats, fused_linear_logprob, fused_opd_loss


def _batch(n, v, num_local, seed):
    gen = torch.Generator().manual_seed(seed)
    put = lambda t: t.to(DEVICE)  # noqa: E731
    return dict(
        targets=put(torch.randint(0, v, (n,), generator=gen)),
        response_ids=put(torch.randint(0, num_local, (n,), generator=gen)),
        response_weights=put(torch.rand(num_local, generator=gen) * 3.75 + 0.25),
        teacher_logp=put(-torch.rand(n, generator=gen) * 6),
        mask=put(torch.rand(n, generator=gen) > 0.25),
    )


def _check(hidden, weight, batch, *, tol=1e-5, skip_hidden_cols=0, **kwargs):
    out = fused_opd_loss(hidden, weight, batch["targets"], batch["response_ids"], batch["response_weights"],
                         teacher_logp=kwargs.pop("teacher_logp", batch["teacher_logp"]), mask=batch["mask"],
                         **kwargs)
    out.loss.backward()
    h64, w64 = leaf64(hidden), leaf64(weight)
    logp, _ = logprob_entropy(h64, w64, batch["targets"], kwargs.get("temperature", 1.0))
    ref_kwargs = {k: kwargs[k] for k in ("old_logp", "advantages", "num_responses", "eps_low", "eps_high",
                                          "dual_clip") if k in kwargs}
    teacher = None if "advantages" in kwargs else batch["teacher_logp"]
    ref = opd_loss(logp, batch["response_ids"], batch["response_weights"], batch["mask"], teacher_logp=teacher,
                   **ref_kwargs)
    ref.backward()
    assert abs(out.loss.item() - ref.item()) <= tol * max(1.0, abs(ref.item()))
    assert rel_err(out.logp[batch["mask"]], logp[batch["mask"]]) < tol
    assert rel_err(hidden.grad[:, skip_hidden_cols:], h64.grad[:, skip_hidden_cols:]) < tol
    assert rel_err(weight.grad, w64.grad) < tol
    # every row of dL/dlogits sums to zero, hence so do the weight gradient's rows summed over the vocab
    assert weight.grad.double().sum(0).abs().max() <= 1e-5 * weight.grad.double().abs().sum(0).max()
    return out


@pytest.mark.parametrize("n,d,v,chunk,temperature", [(1, 8, 37, None, 1.0), (23, 16, 4200, 6, 0.8)])
def test_on_policy_ratio_one_matches_float64(n, d, v, chunk, temperature, backend):
    hidden, weight = random_head(n, d, v, seed=v)
    batch = _batch(n, v, 4, seed=n)
    if n == 1:
        batch["mask"][:] = True
    _check(hidden, weight, batch, chunk_size=chunk, temperature=temperature, num_responses=7)


@pytest.mark.parametrize("seed", range(3))
def test_random_shapes_and_very_negative_logits(seed, backend):
    """Random N, D, V (V from 2 up to past one 4096 block), random chunking, logits shifted to about -500.

    The shift is hidden column 0 (all ones) times weight column 0 (all -500): its gradient is
    -500 * sum_v dL/dz_v = 0, which float32 rounding of dL/dz times 500 cannot reproduce, so that column is
    left out of the comparison."""
    gen = torch.Generator().manual_seed(100 + seed)
    n, d, v = (int(torch.randint(lo, hi, (1,), generator=gen)) for lo, hi in ((1, 40), (4, 40), (2, 5000)))
    chunk = int(torch.randint(1, n + 1, (1,), generator=gen))
    hidden, weight = random_head(n, d, v, seed=seed, logit_std=5.0, offset=-500.0)
    batch = _batch(n, v, 3, seed=seed)
    batch["mask"][0] = True
    _check(hidden, weight, batch, tol=1e-4, skip_hidden_cols=1, chunk_size=chunk, temperature=0.9)


def test_clipping_and_dual_clip_with_old_logp(backend):
    hidden, weight = random_head(40, 16, 900, seed=11)
    batch = _batch(40, 900, 5, seed=12)
    with torch.no_grad():
        logp = fused_linear_logprob(hidden, weight, batch["targets"])
    gen = torch.Generator().manual_seed(13)
    old = logp + (torch.randn(40, generator=gen) * 0.4).to(DEVICE)  # ratios on both sides of the clip range
    _check(hidden, weight, batch, old_logp=old, eps_low=0.2, eps_high=0.28, chunk_size=16)
    hidden.grad = weight.grad = None
    _check(hidden, weight, batch, old_logp=old, dual_clip=1.5, chunk_size=16)


def test_advantages_instead_of_teacher_and_nan_padding(backend):
    hidden, weight = random_head(30, 16, 500, seed=14)
    batch = _batch(30, 500, 3, seed=15)
    gen = torch.Generator().manual_seed(16)
    advantages = torch.randn(30, generator=gen).to(DEVICE)
    advantages[~batch["mask"]] = float("nan")
    batch["targets"][~batch["mask"]] = -100  # masked tokens may carry any target
    batch["response_ids"][~batch["mask"]] = -1
    _check(hidden, weight, batch, teacher_logp=None, advantages=advantages, chunk_size=7)


def test_empty_response_counts_in_the_mean(backend):
    hidden, weight = random_head(12, 8, 300, seed=17)
    batch = _batch(12, 300, 3, seed=18)
    batch["mask"][batch["response_ids"] == 1] = False  # response 1 has no valid token
    batch["teacher_logp"][~batch["mask"]] = float("inf")
    out = _check(hidden, weight, batch)
    assert torch.isfinite(out.loss)


def test_same_kernel_old_logp_gives_ratio_exactly_one_and_scaled_upstream_gradient(backend):
    hidden, weight = random_head(20, 16, 640, seed=19)
    batch = _batch(20, 640, 4, seed=20)
    args = (batch["targets"], batch["response_ids"], batch["response_weights"])
    with torch.no_grad():
        old = fused_linear_logprob(hidden, weight, batch["targets"], chunk_size=8)
    with_old = fused_opd_loss(hidden, weight, *args, teacher_logp=batch["teacher_logp"], mask=batch["mask"],
                              old_logp=old, chunk_size=8)
    (3.0 * with_old.loss).backward()
    grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    without = fused_opd_loss(hidden, weight, *args, teacher_logp=batch["teacher_logp"], mask=batch["mask"],
                             chunk_size=8)
    without.loss.backward()
    assert torch.equal(with_old.logp, old)
    assert with_old.loss.item() == without.loss.item()
    torch.testing.assert_close(grads[0], 3.0 * hidden.grad)
    torch.testing.assert_close(grads[1], 3.0 * weight.grad)


def test_zero_tokens_give_zero_loss_and_gradients(backend):
    hidden, weight = random_head(0, 8, 100, seed=26)
    empty = torch.zeros(0, dtype=torch.long, device=DEVICE)
    out = fused_opd_loss(hidden, weight, empty, empty, torch.ones(2, device=DEVICE),
                         teacher_logp=torch.zeros(0, device=DEVICE))
    out.loss.backward()
    assert out.loss.item() == 0.0 and out.logp.shape == (0,)
    assert hidden.grad.shape == (0, 8) and torch.equal(weight.grad, torch.zeros_like(weight))


def test_no_grad_and_invalid_inputs(backend):
    hidden, weight = random_head(6, 8, 100, seed=21)
    batch = _batch(6, 100, 2, seed=22)
    args = (hidden, weight, batch["targets"], batch["response_ids"], batch["response_weights"])
    with torch.no_grad():
        out = fused_opd_loss(*args, teacher_logp=batch["teacher_logp"])
    assert out.loss.grad_fn is None
    with pytest.raises(ValueError, match="exactly one of"):
        fused_opd_loss(*args)
    with pytest.raises(ValueError, match="eps_low"):
        fused_opd_loss(*args, teacher_logp=batch["teacher_logp"], eps_low=1.0)
    with pytest.raises(ValueError, match="dual_clip"):
        fused_opd_loss(*args, teacher_logp=batch["teacher_logp"], dual_clip=0.5)
    bad_ids = batch["response_ids"].clone()
    bad_ids[0] = 2
    with pytest.raises(ValueError, match="response"):
        fused_opd_loss(hidden, weight, batch["targets"], bad_ids, batch["response_weights"],
                       teacher_logp=batch["teacher_logp"])


def _one_token(backend, log_ratio, advantage, **clip):
    """(loss, out) of one token whose ratio is exp(log_ratio) and advantage `advantage`, checked against the
    float64 reference."""
    hidden, weight = random_head(1, 8, 50, seed=30)
    batch = _batch(1, 50, 1, seed=31)
    batch["mask"][:] = True
    batch["response_weights"] = torch.ones(1, device=DEVICE)
    with torch.no_grad():
        logp = fused_linear_logprob(hidden, weight, batch["targets"])
    out = _check(hidden, weight, batch, teacher_logp=None, advantages=torch.full((1,), advantage, device=DEVICE),
                 old_logp=logp - log_ratio, **clip)
    return out.loss.item(), hidden.grad


@pytest.mark.parametrize(
    "log_ratio, advantage, clipped",
    [(0.5, 1.0, True), (-0.5, 1.0, False), (-0.5, -1.0, True), (0.5, -1.0, False), (0.1, 2.0, False),
     (-0.1, -2.0, False)],
)
def test_ppo_clipping_cases(log_ratio, advantage, clipped, backend):
    loss, grad = _one_token(backend, log_ratio, advantage)
    if clipped:  # the clipped branch is constant in logp
        bound = 1.2 if advantage > 0 else 0.8
        assert loss == pytest.approx(-bound * advantage, rel=1e-6) and torch.all(grad == 0)
    else:
        assert loss == pytest.approx(-math.exp(log_ratio) * advantage, rel=1e-5) and grad.abs().sum() > 0


def test_asymmetric_clip(backend):
    assert torch.all(_one_token(backend, 0.24, 1.0, eps_high=0.2)[1] == 0)  # ratio 1.271 > 1.2
    loss, grad = _one_token(backend, 0.24, 1.0, eps_high=0.28)
    assert loss == pytest.approx(-math.exp(0.24), rel=1e-5) and grad.abs().sum() > 0


def test_dual_clip_caps_negative_advantages(backend):
    loss, grad = _one_token(backend, 2.0, -1.0, dual_clip=3.0)  # ratio 7.39: -ratio * A = 7.39 > 3
    assert loss == pytest.approx(3.0, rel=1e-6) and torch.all(grad == 0)
    assert _one_token(backend, 0.5, -1.0, dual_clip=3.0)[0] == pytest.approx(math.exp(0.5), rel=1e-5)
    assert _one_token(backend, 2.0, 1.0, dual_clip=3.0)[0] == pytest.approx(-1.2, rel=1e-6)


@pytest.mark.parametrize("clip", [{"eps_low": -0.1}, {"eps_high": -0.1}, {"dual_clip": 1.0}])
def test_invalid_clip_parameters(clip, backend):
    hidden, weight = random_head(2, 8, 50, seed=32)
    batch = _batch(2, 50, 1, seed=33)
    with pytest.raises(ValueError, match=next(iter(clip))):
        fused_opd_loss(hidden, weight, batch["targets"], batch["response_ids"], batch["response_weights"],
                       teacher_logp=batch["teacher_logp"], **clip)


def test_num_responses_makes_shard_losses_add_up(backend):
    """Responses split over two shards (data-parallel ranks or micro-batches), each renumbered from 0: with
    num_responses = the whole batch's responses, the shard losses add up to the batch loss."""
    n, v, responses = 40, 300, 8
    hidden, weight = random_head(n, 16, v, seed=34)
    batch = _batch(n, v, responses, seed=35)
    batch["response_ids"] = torch.arange(n, device=DEVICE) * responses // n
    with torch.no_grad():
        old = fused_linear_logprob(hidden, weight, batch["targets"]) + 0.3 * torch.randn(n).to(DEVICE)

    def loss(tokens, first_response, num_local):
        return fused_opd_loss(hidden[tokens], weight, batch["targets"][tokens],
                              batch["response_ids"][tokens] - first_response,
                              batch["response_weights"][first_response: first_response + num_local],
                              teacher_logp=batch["teacher_logp"][tokens], mask=batch["mask"][tokens],
                              old_logp=old[tokens], num_responses=responses).loss.item()

    split = int((batch["response_ids"] < 3).sum())
    full = loss(slice(0, n), 0, responses)
    assert loss(slice(0, split), 0, 3) + loss(slice(split, n), 3, responses - 3) == pytest.approx(full, rel=1e-6)


def test_dn_multipliers_scale_each_response_gradient(backend):
    """The response weights are the normalizer's multipliers of the batch (from domain_stats): each token's
    gradient is the Label gradient times its response's multiplier; with observe multipliers (all 1) the loss
    is exactly the Label loss."""
    b, t, v, domains = 6, 7, 400, ("math", "code", "ifeval")
    hidden, weight = random_head(b * t, 16, v, seed=36)
    batch = _batch(b * t, v, b, seed=37)
    batch["response_ids"] = torch.arange(b * t, device=DEVICE) // t
    domain_ids = torch.arange(b, device=DEVICE) % 3
    gen = torch.Generator().manual_seed(38)
    spread = torch.tensor([0.3, 1.0, 3.0])[domain_ids.cpu()].repeat_interleave(t)
    log_ratio = (torch.randn(b * t, generator=gen) * spread).to(DEVICE).view(b, t)
    stats = domain_stats(log_ratio, batch["mask"].view(b, t), domain_ids, 3)

    def hidden_grad(response_weights):
        hidden.grad = weight.grad = None
        out = fused_opd_loss(hidden, weight, batch["targets"], batch["response_ids"], response_weights,
                             teacher_logp=batch["teacher_logp"], mask=batch["mask"])
        out.loss.backward()
        return out.loss.item(), hidden.grad.clone()

    dn, _ = DomainNormalizer(domains, multipliers="dn").from_statistics(stats)
    observe, _ = DomainNormalizer(domains, multipliers="observe").from_statistics(stats)
    dn_weights = torch.tensor(dn, device=DEVICE)[domain_ids]
    assert dn_weights.min() < 1 < dn_weights.max()
    label_loss, label_grad = hidden_grad(torch.ones(b, device=DEVICE))
    _, dn_grad = hidden_grad(dn_weights)
    per_token = dn_weights[batch["response_ids"]][:, None]
    assert rel_err(dn_grad, label_grad * per_token) < 1e-5  # multipliers > 0: every sign is kept
    observe_loss, _ = hidden_grad(torch.tensor(observe, device=DEVICE)[domain_ids])
    assert observe_loss == label_loss
