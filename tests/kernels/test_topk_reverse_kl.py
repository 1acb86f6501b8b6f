"""fused_topk_reverse_kl against float64 bucketed KL over materialised logits, on both backends, at TP 1 and 2;
with every token of the vocabulary as a candidate it equals the full-vocabulary KL (fused_reverse_kl)."""

import pytest
import torch
import torch.distributed as dist
from distributed import run_workers
from kernel_reference import (
    BACKEND_TOL,
    BACKENDS,
    DEVICE,
    FLOAT64_TOL,
    leaf64,
    random_head,
    rel_err,
    response_mean,
    reverse_kl,
    topk_reverse_kl,
)

from dnmopd.kernels import fused_reverse_kl, fused_topk_reverse_kl
from dnmopd.kernels.utils import kernel_backend


def _teacher_topk(n, v, k, *, seed, empty=0):
    """A random teacher's k most likely ids per token and its float32 log-probs there (`empty` slots of each row
    set to -1), plus per-response ids, weights and a mask."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, v, generator=gen, dtype=torch.float64) * 3.0
    values, ids = torch.log_softmax(logits, -1).topk(k, dim=-1)
    if empty:
        ids[:, -empty:] = -1
    ids = ids[:, torch.randperm(k, generator=gen)]  # any order
    values = torch.log_softmax(logits, -1).gather(1, ids.clamp(min=0)).float()
    response_ids = torch.randint(0, 3, (n,), generator=gen)
    weights = torch.rand(3, generator=gen) * 3.75 + 0.25
    mask = torch.rand(n, generator=gen) > 0.2
    mask[0] = True
    return [t.to(DEVICE) for t in (ids, values, response_ids, weights, mask)]


def _reference(hidden, weight, ids, values, response_ids, weights, mask, temperature, num_responses=None):
    h64, w64 = leaf64(hidden), leaf64(weight)
    kl = topk_reverse_kl(h64, w64, ids, values, temperature)
    loss = response_mean(kl * weights.double()[response_ids], response_ids, mask, 3, num_responses)
    loss.backward()
    return kl.detach(), loss.detach(), h64.grad, w64.grad


@pytest.mark.parametrize("n,d,v,k,empty,chunk,temperature", [
    (1, 8, 37, 5, 0, None, 1.0),
    (19, 16, 3000, 16, 3, 4, 0.9),
    (11, 16, 800, 64, 0, None, 1.2),
])
def test_matches_float64(n, d, v, k, empty, chunk, temperature, backend):
    hidden, weight = random_head(n, d, v, seed=v + 3)
    ids, values, response_ids, weights, mask = _teacher_topk(n, v, k, seed=n + v, empty=empty)
    out = fused_topk_reverse_kl(hidden, weight, ids, values, response_ids, weights, mask=mask,
                                temperature=temperature, chunk_size=chunk, num_responses=5)
    out.loss.backward()
    kl, loss, grad_hidden, grad_weight = _reference(hidden, weight, ids, values, response_ids, weights, mask,
                                                    temperature, num_responses=5)
    assert rel_err(out.kl[mask], kl[mask]) < FLOAT64_TOL
    assert (out.kl[~mask] == 0).all() and (out.kl > -1e-6).all()
    assert abs(out.loss.item() - loss.item()) < FLOAT64_TOL * max(1.0, loss.item())
    assert rel_err(hidden.grad, grad_hidden) < FLOAT64_TOL and rel_err(weight.grad, grad_weight) < FLOAT64_TOL
    student = torch.softmax((hidden.double() @ weight.double().t()) / temperature, -1)
    expected_mass = torch.where(ids >= 0, student.gather(1, ids.clamp(min=0)), 0.0).sum(1)
    assert rel_err(out.student_mass[mask], expected_mass[mask]) < FLOAT64_TOL
    # dL/dlogits rows sum to zero, hence so do the weight gradient's rows summed over the vocab
    assert weight.grad.double().sum(0).abs().max() <= 1e-5 * weight.grad.double().abs().sum(0).max()


def test_every_token_a_candidate_equals_the_full_vocabulary_kl(backend):
    n, d, v = 9, 16, 300
    hidden, weight = random_head(n, d, v, seed=41)
    teacher_hidden, teacher_weight = random_head(n, 12, v, seed=42, logit_std=4.0)
    teacher_logits = (teacher_hidden @ teacher_weight.t()).detach()
    _, _, response_ids, weights, mask = _teacher_topk(n, v, 1, seed=43)
    candidates = torch.arange(v, device=DEVICE).flip(0).repeat(n, 1)  # k = V, in any order
    values = torch.log_softmax(teacher_logits.double(), -1).gather(1, candidates).float()
    topk = fused_topk_reverse_kl(hidden, weight, candidates, values, response_ids, weights, mask=mask)
    topk.loss.backward()
    grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    full = fused_reverse_kl(hidden, weight, response_ids, weights, mask=mask, teacher_logits=teacher_logits)
    full.loss.backward()
    assert rel_err(topk.kl[mask], full.kl[mask]) < FLOAT64_TOL
    assert abs(topk.loss.item() - full.loss.item()) < FLOAT64_TOL * full.loss.item()
    assert rel_err(grads[0], hidden.grad) < FLOAT64_TOL and rel_err(grads[1], weight.grad) < FLOAT64_TOL
    assert torch.allclose(topk.student_mass[mask], torch.ones(int(mask.sum()), device=DEVICE), atol=1e-5)
    assert rel_err(topk.kl[mask], reverse_kl(hidden, weight, teacher_logits)[mask]) < FLOAT64_TOL


def test_teacher_covering_all_its_mass_floors_its_tail(backend):
    """Candidates that hold the teacher's whole mass but not the student's: the teacher's tail is TAIL_FLOOR, so
    the KL is large and finite, and the gradient moves the student's tail mass into the candidates."""
    hidden, weight = random_head(3, 8, 40, seed=44)
    ids = torch.tensor([[0, 1], [2, 3], [4, 5]], device=DEVICE)
    values = torch.log(torch.tensor([[0.5, 0.5], [0.9, 0.1], [1.0 - 1e-9, 1e-9]], device=DEVICE))
    response_ids, weights = torch.zeros(3, dtype=torch.long, device=DEVICE), torch.ones(1, device=DEVICE)
    out = fused_topk_reverse_kl(hidden, weight, ids, values, response_ids, weights)
    out.loss.backward()
    h64, w64 = leaf64(hidden), leaf64(weight)
    kl = topk_reverse_kl(h64, w64, ids, values)
    assert torch.isfinite(out.kl).all() and (out.kl > 5).all()
    assert rel_err(out.kl, kl) < FLOAT64_TOL
    (kl.mean()).backward()
    assert rel_err(hidden.grad, h64.grad) < FLOAT64_TOL and rel_err(weight.grad, w64.grad) < FLOAT64_TOL


def test_invalid_candidates_raise(backend):
    hidden, weight = random_head(4, 8, 50, seed=45)
    response_ids, weights = torch.zeros(4, dtype=torch.long, device=DEVICE), torch.ones(1, device=DEVICE)
    ids = torch.tensor([[1, 2], [3, 4], [5, 6], [7, 8]], device=DEVICE)
    values = torch.full((4, 2), -1.0, device=DEVICE)
    with pytest.raises(ValueError, match="names one candidate twice"):
        fused_topk_reverse_kl(hidden, weight, torch.tensor([[1, 1]] * 4, device=DEVICE), values, response_ids,
                              weights)
    with pytest.raises(ValueError, match="lies above 0"):
        fused_topk_reverse_kl(hidden, weight, ids, values.abs(), response_ids, weights)
    with pytest.raises(ValueError, match="not finite"):
        fused_topk_reverse_kl(hidden, weight, ids, values.fill_(float("nan")), response_ids, weights)
    with pytest.raises(ValueError, match="outside \\[0, vocab size\\)"):
        fused_topk_reverse_kl(hidden, weight, ids + 45, torch.full((4, 2), -1.0, device=DEVICE), response_ids,
                              weights)
    with pytest.raises(ValueError, match="must match candidates"):
        fused_topk_reverse_kl(hidden, weight, ids, torch.zeros(4, 3, device=DEVICE), response_ids, weights)
    # a token that does not count may hold anything
    mask = torch.tensor([True, True, True, False], device=DEVICE)
    bad = torch.tensor([[1, 2], [3, 4], [5, 6], [9, 9]], device=DEVICE)
    out = fused_topk_reverse_kl(hidden, weight, bad, torch.full((4, 2), -1.0, device=DEVICE), response_ids, weights,
                                mask=mask)
    assert out.kl[3] == 0


N, D, V, K = 13, 16, 2 * 1029, 12  # each shard spans more than one 1024 block, ragged tail


def _tp_inputs():
    hidden, weight = (t.detach().cpu() for t in random_head(N, D, V, seed=46))
    ids, values, response_ids, weights, mask = (t.cpu() for t in _teacher_topk(N, V, K, seed=47, empty=2))
    return hidden, weight, ids, values, response_ids, weights, mask


def _tp_run(vocab_slice, vocab_start, group):
    hidden, weight, ids, values, response_ids, weights, mask = _tp_inputs()
    hidden = hidden.clone().requires_grad_()
    weight = weight[vocab_slice].clone().requires_grad_()
    out = fused_topk_reverse_kl(hidden, weight, ids, values, response_ids, weights, mask=mask,
                                vocab_start=vocab_start, tp_group=group, chunk_size=5, temperature=0.8)
    out.loss.backward()
    return {"loss": out.loss.detach(), "kl": out.kl, "mass": out.student_mass, "grad_hidden": hidden.grad,
            "grad_weight": weight.grad}


def _tp_worker(rank, world_size):
    shard = V // world_size
    out = {}
    for name in BACKENDS:
        with kernel_backend(name):
            result = _tp_run(slice(rank * shard, (rank + 1) * shard), rank * shard, dist.group.WORLD)
        out[name] = {k: v.numpy() for k, v in result.items()}
    return out


@pytest.mark.skipif(torch.cuda.is_available(), reason="gloo TP test runs the kernel on CPU")
def test_tp2_equals_single_process_and_float64():
    workers = run_workers(2, _tp_worker)
    hidden, weight, ids, values, response_ids, weights, mask = _tp_inputs()
    kl, loss, grad_hidden, grad_weight = _reference(hidden, weight, ids, values, response_ids, weights, mask, 0.8)
    tp2 = {}
    for name in BACKENDS:
        ranks = [{k: torch.from_numpy(v) for k, v in r[name].items()} for r in workers]
        with kernel_backend(name):
            single = _tp_run(slice(0, V), 0, None)
        for key in ("loss", "kl", "mass"):
            assert torch.equal(ranks[0][key], ranks[1][key]), (name, key)  # every rank merges identically
            torch.testing.assert_close(ranks[0][key], single[key], rtol=1e-5, atol=1e-6, msg=f"{name} {key}")
        reduced = {"kl": ranks[0]["kl"], "loss": ranks[0]["loss"],
                   "grad_hidden": ranks[0]["grad_hidden"] + ranks[1]["grad_hidden"],  # the caller's TP reduction
                   "grad_weight": torch.cat([ranks[0]["grad_weight"], ranks[1]["grad_weight"]])}
        for key in ("grad_hidden", "grad_weight"):
            assert rel_err(reduced[key], single[key]) < 1e-5, (name, key)
        assert rel_err(reduced["kl"][mask], kl[mask]) < FLOAT64_TOL, name
        assert abs(reduced["loss"].item() - loss.item()) < FLOAT64_TOL * loss.item(), name
        assert rel_err(reduced["grad_hidden"], grad_hidden) < FLOAT64_TOL, name
        assert rel_err(reduced["grad_weight"], grad_weight) < FLOAT64_TOL, name
        tp2[name] = reduced
    for key, native in tp2["native"].items():
        assert rel_err(native, tp2["triton"][key]) <= BACKEND_TOL, key
