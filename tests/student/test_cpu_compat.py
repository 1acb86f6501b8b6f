"""megatron-core's CPU layer is a block: on inside `cpu_compat()`, and everything it changed is back after it."""

import pytest
import torch

from dnmopd.student.cpu_compat import cpu_compat

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the layer changes nothing on a CUDA machine")


def cuda_state():
    import megatron.core.tensor_parallel.random as megatron_random

    names = ("current_device", "synchronize", "set_device", "get_rng_state", "set_rng_state", "manual_seed")
    return ({n: getattr(torch.cuda, n) for n in names},
            {n: getattr(megatron_random, n) for n in ("_get_cuda_rng_state", "_set_cuda_rng_state")})


def test_inside_the_block_cuda_arguments_land_on_the_cpu_and_after_it_nothing_is_left():
    before = cuda_state()
    with cpu_compat() as active:
        assert active is True
        assert torch.zeros(2, device="cuda").device.type == "cpu"
        assert torch.ones(1).cuda().device.type == "cpu" and torch.ones(1).type() == "torch.cuda.FloatTensor"
        assert torch.cuda.current_device() == "cpu"
        with cpu_compat():  # nested: one activation
            pass
        assert torch.zeros(1, device="cuda").device.type == "cpu"  # the inner exit left the outer block on
    assert cuda_state() == before
    assert torch.ones(1).type() == "torch.FloatTensor"
    with pytest.raises((RuntimeError, AssertionError)):  # no CUDA driver: a CUDA tensor fails again
        torch.zeros(1, device="cuda")


def test_an_error_inside_the_block_still_undoes_it():
    before = cuda_state()
    with pytest.raises(ValueError, match="boom"), cpu_compat():
        raise ValueError("boom")
    assert cuda_state() == before
