"""Vocab-sharded TP = 2 (2-process gloo) equals the single-process result for every fused op."""

import pytest
import torch
import torch.distributed as dist
from distributed import run_workers
from dnmopd.kernels import fused_linear_logprob, fused_opd_loss, fused_reverse_kl
from kernel_reference import rel_err

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
    out = _run_ops(_inputs(), slice(rank * shard, (rank + 1) * shard), rank * shard, dist.group.WORLD)
    return {k: v.numpy() for k, v in out.items()}  # by value: the worker exits before the queue is read


def test_tp2_equals_single_process():
    ranks = [{k: torch.from_numpy(v) for k, v in r.items()} for r in run_workers(2, _tp_worker)]
    single = _run_ops(_inputs(), slice(0, V), 0, None)
    for key in ("logp", "entropy", "opd_loss", "opd_logp", "rkl_loss", "kl"):
        assert torch.equal(ranks[0][key], ranks[1][key]), key  # every rank merges identically
        torch.testing.assert_close(ranks[0][key], single[key], rtol=1e-5, atol=1e-6, msg=key)
    for op in ("logprob", "opd", "rkl"):
        # grad_hidden: each rank's partial sum over its shard; the caller's TP reduction sums them once
        reduced = ranks[0][f"{op}_grad_hidden"] + ranks[1][f"{op}_grad_hidden"]
        assert rel_err(reduced, single[f"{op}_grad_hidden"]) < 1e-5, op
        stacked = torch.cat([ranks[0][f"{op}_grad_weight"], ranks[1][f"{op}_grad_weight"]])
        assert rel_err(stacked, single[f"{op}_grad_weight"]) < 1e-5, op
