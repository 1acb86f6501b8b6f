"""fused_reverse_kl against float64 KL(student || teacher) over materialised logits, on both backends."""

import pytest
import torch
from kernel_reference import DEVICE, leaf64, random_head, rel_err, response_mean, reverse_kl

from dnmopd.kernels import fused_reverse_kl


def _batch(n, num_local, seed):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randint(0, num_local, (n,), generator=gen).to(DEVICE),
            (torch.rand(num_local, generator=gen) * 3.75 + 0.25).to(DEVICE),
            (torch.rand(n, generator=gen) > 0.2).to(DEVICE))


@pytest.mark.parametrize("n,d,d_teacher,v,chunk,temperature,given_logits", [
    (1, 8, 12, 37, None, 1.0, False),
    (19, 16, 24, 4500, 4, 0.9, False),
    (11, 16, 8, 800, None, 1.2, True),
])
def test_matches_float64(n, d, d_teacher, v, chunk, temperature, given_logits, backend):
    hidden, weight = random_head(n, d, v, seed=v + 1)
    teacher_hidden, teacher_weight = random_head(n, d_teacher, v, seed=v + 2, logit_std=4.0)
    ids, weights, mask = _batch(n, 3, seed=n)
    mask[0] = True
    teacher_logits = (teacher_hidden @ teacher_weight.t()).detach()
    teacher = ({"teacher_logits": teacher_logits} if given_logits
               else {"teacher_hidden": teacher_hidden, "teacher_weight": teacher_weight})
    out = fused_reverse_kl(hidden, weight, ids, weights, mask=mask, temperature=temperature, chunk_size=chunk,
                           num_responses=5, **teacher)
    out.loss.backward()
    h64, w64 = leaf64(hidden), leaf64(weight)
    kl = reverse_kl(h64, w64, teacher_logits, temperature)
    ref = response_mean(kl * weights.double()[ids], ids, mask, 3, num_responses=5)
    ref.backward()
    assert (out.kl > -1e-6).all()
    assert rel_err(out.kl, kl) < 1e-5
    assert abs(out.loss.item() - ref.item()) < 1e-5 * max(1.0, ref.item())
    assert rel_err(hidden.grad, h64.grad) < 1e-5 and rel_err(weight.grad, w64.grad) < 1e-5
    assert teacher_hidden.grad is None and teacher_weight.grad is None  # the teacher gets no gradient
    # dL/dlogits rows sum to zero, hence so do the weight gradient's rows summed over the vocab
    assert weight.grad.double().sum(0).abs().max() <= 1e-5 * weight.grad.double().abs().sum(0).max()


def test_identical_teacher_gives_zero_kl_and_gradient(backend):
    hidden, weight = random_head(7, 16, 300, seed=30)
    ids, weights, _ = _batch(7, 2, seed=31)
    out = fused_reverse_kl(hidden, weight, ids, weights, teacher_hidden=hidden.detach().clone(),
                           teacher_weight=weight.detach().clone())
    out.loss.backward()
    assert out.kl.abs().max() < 1e-5
    assert hidden.grad.abs().max() < 1e-5 and weight.grad.abs().max() < 1e-5


def test_bf16_student_with_float32_logits(backend):
    hidden, weight = random_head(12, 32, 2000, seed=32, dtype=torch.bfloat16)
    teacher_hidden, teacher_weight = random_head(12, 32, 2000, seed=33, dtype=torch.bfloat16)
    ids, weights, mask = _batch(12, 2, seed=34)
    out = fused_reverse_kl(hidden, weight, ids, weights, mask=mask, teacher_hidden=teacher_hidden,
                           teacher_weight=teacher_weight)
    out.loss.backward()
    h64, w64 = leaf64(hidden), leaf64(weight)
    kl = reverse_kl(h64, w64, teacher_hidden.double() @ teacher_weight.double().t())
    response_mean(kl * weights.double()[ids], ids, mask, 2).backward()
    assert rel_err(out.kl, kl) < 1e-5  # float32 logits of exactly the bf16 inputs
    assert rel_err(hidden.grad, h64.grad) < 1e-2 and rel_err(weight.grad, w64.grad) < 1e-2


def test_invalid_teacher_inputs_raise(backend):
    hidden, weight = random_head(4, 8, 50, seed=35)
    ids, weights, _ = _batch(4, 2, seed=36)
    with pytest.raises(ValueError, match="teacher_hidden and teacher_weight"):
        fused_reverse_kl(hidden, weight, ids, weights)
    with pytest.raises(ValueError, match="teacher_logits must be"):
        fused_reverse_kl(hidden, weight, ids, weights, teacher_logits=torch.zeros(4, 49, device=DEVICE))
    with pytest.raises(ValueError, match="same vocab shard"):
        fused_reverse_kl(hidden, weight, ids, weights, teacher_hidden=torch.zeros(4, 6, device=DEVICE),
                         teacher_weight=torch.zeros(49, 6, device=DEVICE))
