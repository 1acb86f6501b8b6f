"""The native and the Triton implementation of each op agree on the same inputs, and the right one is chosen."""

import importlib
import os
import subprocess
import sys

import pytest
import torch
from kernel_reference import (
    BACKEND_TOL,
    BACKEND_TOL_BF16,
    DEVICE,
    FLOAT64_TOL,
    leaf64,
    logprob_entropy,
    random_head,
    rel_err,
)

from dnmopd.kernels import (
    domain_stats,
    fused_linear_logprob,
    fused_opd_loss,
    fused_reverse_kl,
    linear_logprob,
    opd_loss,
    reverse_kl,
)
from dnmopd.kernels.utils import BACKEND_ENV, kernel_backend

N, D, D_TEACHER, V = 37, 32, 16, 5000  # over one 4096 vocab block, ragged; several chunks of 16


def _per_token(seed):
    gen = torch.Generator().manual_seed(seed)
    return dict(
        targets=torch.randint(0, V, (N,), generator=gen).to(DEVICE),
        response_ids=torch.randint(0, 4, (N,), generator=gen).to(DEVICE),
        response_weights=(torch.rand(4, generator=gen) * 1.5 + 0.5).to(DEVICE),
        teacher_logp=(-torch.rand(N, generator=gen) * 5).to(DEVICE),
        old_shift=(torch.randn(N, generator=gen) * 0.3).to(DEVICE),
        mask=(torch.rand(N, generator=gen) > 0.2).to(DEVICE),
        up_logp=torch.randn(N, generator=gen).to(DEVICE),
        up_entropy=torch.randn(N, generator=gen).to(DEVICE),
    )


def _logprob(dtype):
    hidden, weight = random_head(N, D, V, seed=1, dtype=dtype)
    x = _per_token(2)
    logp, entropy = fused_linear_logprob(hidden, weight, x["targets"], return_entropy=True, temperature=0.8,
                                         chunk_size=16)
    (logp * x["up_logp"] + entropy * x["up_entropy"]).sum().backward()
    return {"logp": logp.detach(), "entropy": entropy.detach()}, (hidden, weight)


def _opd(dtype):
    hidden, weight = random_head(N, D, V, seed=3, dtype=dtype)
    x = _per_token(4)
    with torch.no_grad():
        old = fused_linear_logprob(hidden, weight, x["targets"]) + x["old_shift"]
    out = fused_opd_loss(hidden, weight, x["targets"], x["response_ids"], x["response_weights"],
                         teacher_logp=x["teacher_logp"], mask=x["mask"], old_logp=old, dual_clip=2.0,
                         eps_high=0.28, temperature=0.9, chunk_size=16)
    out.loss.backward()
    return {"loss": out.loss.detach(), "logp": out.logp}, (hidden, weight)


def _reverse_kl(dtype):
    hidden, weight = random_head(N, D, V, seed=5, dtype=dtype)
    teacher_hidden, teacher_weight = random_head(N, D_TEACHER, V, seed=6, dtype=dtype, logit_std=4.0)
    x = _per_token(7)
    out = fused_reverse_kl(hidden, weight, x["response_ids"], x["response_weights"], mask=x["mask"],
                           teacher_hidden=teacher_hidden, teacher_weight=teacher_weight, temperature=1.1,
                           chunk_size=16)
    out.loss.backward()
    return {"loss": out.loss.detach(), "kl": out.kl}, (hidden, weight)


@pytest.mark.parametrize("op", [_logprob, _opd, _reverse_kl])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_equals_triton(op, dtype):
    results = {}
    for name in ("native", "triton"):
        with kernel_backend(name):
            values, (hidden, weight) = op(dtype)
        results[name] = {**values, "grad_hidden": hidden.grad, "grad_weight": weight.grad}
    grad_tol = BACKEND_TOL if dtype == torch.float32 else BACKEND_TOL_BF16
    for key, native in results["native"].items():
        tol = grad_tol if key.startswith("grad") else BACKEND_TOL
        assert native.dtype == results["triton"][key].dtype, key
        assert rel_err(native, results["triton"][key]) <= tol, key


def test_both_backends_match_float64_on_the_same_inputs():
    hidden, weight = random_head(N, D, V, seed=8)
    x = _per_token(9)
    h64, w64 = leaf64(hidden), leaf64(weight)
    ref_logp, ref_entropy = logprob_entropy(h64, w64, x["targets"])
    (ref_logp * x["up_logp"].double() + ref_entropy * x["up_entropy"].double()).sum().backward()
    for name in ("native", "triton"):
        hidden.grad = weight.grad = None
        with kernel_backend(name):
            logp, entropy = fused_linear_logprob(hidden, weight, x["targets"], return_entropy=True, chunk_size=16)
        (logp * x["up_logp"] + entropy * x["up_entropy"]).sum().backward()
        for value, ref in ((logp, ref_logp), (entropy, ref_entropy), (hidden.grad, h64.grad),
                           (weight.grad, w64.grad)):
            assert rel_err(value, ref) <= FLOAT64_TOL, name


def test_domain_stats_native_equals_triton():
    gen = torch.Generator().manual_seed(10)
    log_ratio = (torch.randn(11, 5000, generator=gen) * 3).to(DEVICE)
    mask = (torch.rand(11, 5000, generator=gen) > 0.4).to(DEVICE)
    log_ratio[~mask] = float("nan")
    ids = torch.randint(0, 3, (11,), generator=gen).to(DEVICE)
    results = {}
    for name in ("native", "triton"):
        with kernel_backend(name):
            results[name] = domain_stats(log_ratio, mask, ids, 3)
    torch.testing.assert_close(results["native"], results["triton"], rtol=1e-12, atol=1e-12)


domain_stats_module = importlib.import_module("dnmopd.kernels.domain_stats")  # the package exports the function
TRITON_KERNELS = [
    (linear_logprob, "_logprob_stats_kernel"), (linear_logprob, "_logprob_grad_kernel"),
    (opd_loss, "_opd_token_kernel"), (reverse_kl, "_rkl_stats_kernel"), (reverse_kl, "_rkl_grad_kernel"),
    (domain_stats_module, "_domain_stats_kernel"),
]


class _Launched(Exception):
    pass


class _NoLaunch:
    def __getitem__(self, grid):
        raise _Launched


def _all_ops():
    for op in (_logprob, _opd, _reverse_kl):
        op(torch.float32)
    gen = torch.Generator().manual_seed(11)
    domain_stats(torch.randn(3, 7, generator=gen).to(DEVICE), torch.ones(3, 7, dtype=torch.bool, device=DEVICE),
                 torch.tensor([0, 1, 1], device=DEVICE), 2)


@pytest.mark.skipif(DEVICE.type == "cuda", reason="the automatic choice on CUDA tensors is Triton")
def test_cpu_tensors_take_the_native_path_by_default(monkeypatch):
    monkeypatch.delenv(BACKEND_ENV, raising=False)
    for module, name in TRITON_KERNELS:
        monkeypatch.setattr(module, name, _NoLaunch())
    _all_ops()  # no Triton kernel is launched
    monkeypatch.setenv(BACKEND_ENV, "triton")
    with pytest.raises(_Launched):
        _all_ops()


def test_unknown_backend_is_refused(monkeypatch):
    monkeypatch.setenv(BACKEND_ENV, "cuda")
    hidden, weight = random_head(2, 4, 10, seed=12)
    with pytest.raises(ValueError, match=f"{BACKEND_ENV}='cuda': expected one of auto, native, triton"):
        fused_linear_logprob(hidden, weight, torch.tensor([1, 2], device=DEVICE))


@pytest.mark.skipif(DEVICE.type == "cuda", reason="CPU tensors only")
def test_triton_on_cpu_without_the_interpreter_is_refused():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env[BACKEND_ENV] = "triton"
    code = ("import torch; from dnmopd.kernels import fused_linear_logprob; "
            "fused_linear_logprob(torch.randn(2, 4), torch.randn(10, 4), torch.tensor([1, 2]))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert f"{BACKEND_ENV}=triton on cpu tensors needs the Triton interpreter: set TRITON_INTERPRET=1" in proc.stderr
