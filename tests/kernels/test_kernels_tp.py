"""Vocab-sharded TP = 2 (2-process gloo) equals the single-process result for every fused op, on both backends,
and the native and Triton TP = 2 results agree with each other and with float64."""

import pytest
import torch
import torch.distributed as dist
from distributed import run_workers
from kernel_reference import (
    BACKEND_TOL,
    BACKENDS,
    FLOAT64_TOL,
    leaf64,
    logprob_entropy,
    opd_loss,
    rel_err,
    response_mean,
    reverse_kl,
)

from dnmopd.kernels import fused_linear_logprob, fused_opd_loss, fused_reverse_kl
from dnmopd.kernels.utils import kernel_backend

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="gloo TP test runs the kernels on CPU")

N, D, D_TEACHER, V = 21, 16, 12, 2 * 1029  # each shard spans more than one 1024 block, ragged tail


def _inputs():
    gen = torch.Generator().manual_seed(7)
    return dict(
        hidden=torch.randn(N, D, generator=gen), weight=torch.randn(V, D, generator=gen) * 0.75,
        teacher_hidden=torch.randn(N, D_TEACHER, generator=gen),
        teacher_weight=torch.randn(V, D_TEACHER, generator=gen) * 0.75,
        targets=torch.randint(0, V, (N,), generator=gen), response_ids=torch.randint(0, 3, (N,), generator=gen),
        response_weights=torch.rand(3, generator=gen) + 0.5, teacher_logp=-torch.rand(N, generator=gen) * 5,
        mask=torch.rand(N, generator=gen) > 0.2, up_logp=torch.randn(N, generator=gen),
        up_entropy=torch.randn(N, generator=gen),
    )


def _run_ops(x, vocab_slice, vocab_start, group):
    """logp/entropy (with upstream grads), OPD loss and reverse KL on one vocab shard; grads per op."""
    out = {}
    for op in ("logprob", "opd", "rkl"):
        hidden = x["hidden"].clone().requires_grad_()
        weight = x["weight"][vocab_slice].clone().requires_grad_()
        if op == "logprob":
            logp, entropy = fused_linear_logprob(hidden, weight, x["targets"], vocab_start=vocab_start,
                                                 return_entropy=True, tp_group=group, chunk_size=8)
            (logp * x["up_logp"] + entropy * x["up_entropy"]).sum().backward()
            out["logp"], out["entropy"] = logp.detach(), entropy.detach()
        elif op == "opd":
            res = fused_opd_loss(hidden, weight, x["targets"], x["response_ids"], x["response_weights"],
                                 teacher_logp=x["teacher_logp"], mask=x["mask"], vocab_start=vocab_start,
                                 tp_group=group, chunk_size=8)
            res.loss.backward()
            out["opd_loss"], out["opd_logp"] = res.loss.detach(), res.logp
        else:
            res = fused_reverse_kl(hidden, weight, x["response_ids"], x["response_weights"],
                                   teacher_hidden=x["teacher_hidden"], teacher_weight=x["teacher_weight"][vocab_slice],
                                   mask=x["mask"], tp_group=group, chunk_size=8)
            res.loss.backward()
            out["rkl_loss"], out["kl"] = res.loss.detach(), res.kl
        out[f"{op}_grad_hidden"], out[f"{op}_grad_weight"] = hidden.grad, weight.grad
    return out


def _tp_worker(rank, world_size):
    shard = V // world_size
    out = {}
    for name in BACKENDS:
        with kernel_backend(name):
            ops = _run_ops(_inputs(), slice(rank * shard, (rank + 1) * shard), rank * shard, dist.group.WORLD)
        out[name] = {k: v.numpy() for k, v in ops.items()}  # by value: the worker exits before the queue is read
    return out


def _float64_reference():
    """Values and full (unsharded) gradients of the three ops in float64 over materialised logits."""
    x = _inputs()
    ref = {}
    h64, w64 = leaf64(x["hidden"]), leaf64(x["weight"])
    logp, entropy = logprob_entropy(h64, w64, x["targets"])
    (logp * x["up_logp"].double() + entropy * x["up_entropy"].double()).sum().backward()
    ref.update(logp=logp, entropy=entropy, logprob_grad_hidden=h64.grad, logprob_grad_weight=w64.grad)
    h64, w64 = leaf64(x["hidden"]), leaf64(x["weight"])
    logp, _ = logprob_entropy(h64, w64, x["targets"])
    loss = opd_loss(logp, x["response_ids"], x["response_weights"], x["mask"], teacher_logp=x["teacher_logp"])
    loss.backward()
    ref.update(opd_loss=loss, opd_grad_hidden=h64.grad, opd_grad_weight=w64.grad)
    h64, w64 = leaf64(x["hidden"]), leaf64(x["weight"])
    kl = reverse_kl(h64, w64, x["teacher_hidden"].double() @ x["teacher_weight"].double().t())
    loss = response_mean(kl * x["response_weights"].double()[x["response_ids"]], x["response_ids"], x["mask"], 3)
    loss.backward()
    ref.update(rkl_loss=loss, kl=kl, rkl_grad_hidden=h64.grad, rkl_grad_weight=w64.grad)
    return {k: v.detach() for k, v in ref.items()}


def _reduced(ranks, key):
    """grad_hidden: each rank's partial sum over its shard, summed once (the caller's TP reduction);
    grad_weight: the shards stacked; values: rank 0's (equal on every rank)."""
    if key.endswith("grad_hidden"):
        return ranks[0][key] + ranks[1][key]
    if key.endswith("grad_weight"):
        return torch.cat([ranks[0][key], ranks[1][key]])
    return ranks[0][key]


def test_tp2_equals_single_process():
    workers = run_workers(2, _tp_worker)
    reference = _float64_reference()
    tp2 = {}
    for name in BACKENDS:
        ranks = [{k: torch.from_numpy(v) for k, v in r[name].items()} for r in workers]
        with kernel_backend(name):
            single = _run_ops(_inputs(), slice(0, V), 0, None)
        for key in ("logp", "entropy", "opd_loss", "opd_logp", "rkl_loss", "kl"):
            assert torch.equal(ranks[0][key], ranks[1][key]), (name, key)  # every rank merges identically
            torch.testing.assert_close(ranks[0][key], single[key], rtol=1e-5, atol=1e-6, msg=f"{name} {key}")
        for op in ("logprob", "opd", "rkl"):
            for grad in ("grad_hidden", "grad_weight"):
                key = f"{op}_{grad}"
                assert rel_err(_reduced(ranks, key), single[key]) < 1e-5, (name, key)
        tp2[name] = {key: _reduced(ranks, key) for key in ranks[0]}
    for key, native in tp2["native"].items():
        assert rel_err(native, tp2["triton"][key]) <= BACKEND_TOL, key
        if key in reference:
            assert rel_err(native, reference[key]) <= FLOAT64_TOL, key
            assert rel_err(tp2["triton"][key], reference[key]) <= FLOAT64_TOL, key
