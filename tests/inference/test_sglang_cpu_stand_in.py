"""Our stand-in for vLLM's `rotary_embedding` (dnmopd/serving/sglang_cpu) against rotation by complex numbers in
float64, for both layouts; the real SGLang server tests check the neox layout end to end against transformers."""

import importlib.util
import os

import pytest
import torch

from dnmopd.serving.servers import SGLANG_CPU_STAND_IN, ServerSpec, server_command, server_env


def stand_in():
    spec = importlib.util.spec_from_file_location("stand_in_ops", SGLANG_CPU_STAND_IN / "vllm" / "_custom_ops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.rotary_embedding


def rotated(x, positions, rotary_dim, base, neox):
    """x [T, H, D] float64, the first rotary_dim features of each head turned by position * base^(-2j/rotary_dim)."""
    half = rotary_dim // 2
    angles = positions[:, None].double() * base ** (-torch.arange(half, dtype=torch.float64) * 2 / rotary_dim)
    rot = x[..., :rotary_dim]
    pairs = (rot[..., :half], rot[..., half:]) if neox else (rot[..., 0::2], rot[..., 1::2])
    turned = torch.complex(*pairs) * torch.polar(torch.ones_like(angles), angles)[:, None, :]
    out = x.clone()
    if neox:
        out[..., :half], out[..., half:rotary_dim] = turned.real, turned.imag
    else:
        out[..., 0:rotary_dim:2], out[..., 1:rotary_dim:2] = turned.real, turned.imag
    return out


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("rotary_dim", [64, 32])
def test_rotary_embedding_matches_complex_rotation(neox, rotary_dim):
    generator = torch.Generator().manual_seed(0)
    tokens, heads, kv_heads, head_size, base = 7, 4, 2, 64, 10000.0
    positions = torch.tensor([0, 1, 2, 5, 9, 100, 511])
    half = rotary_dim // 2
    inv_freq = base ** (-torch.arange(half, dtype=torch.float64) * 2 / rotary_dim)
    freqs = torch.arange(512, dtype=torch.float64)[:, None] * inv_freq
    cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1).float()  # SGLang's layout: cos half, sin half
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_size, generator=generator)
    query, key, _ = qkv.split([heads * head_size, kv_heads * head_size, kv_heads * head_size], dim=-1)
    q_in, k_in = query.clone(), key.clone()
    stand_in()(positions, query, key, head_size, cache, neox)  # in place, on views into qkv
    for got, before, count in ((query, q_in, heads), (key, k_in, kv_heads)):
        want = rotated(before.double().view(tokens, count, head_size), positions, rotary_dim, base, neox)
        torch.testing.assert_close(got.view(tokens, count, head_size).double(), want, atol=1e-5, rtol=0)


def test_cpu_servers_get_the_cpu_flags_the_stand_in_and_the_checkpoint_dtype(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "qwen3", "torch_dtype": "float32"}')
    spec = ServerSpec(name="t", backend="sglang", model_path=str(tmp_path), port=30000, device="cpu")
    command = server_command(spec)
    assert command[command.index("--dtype") + 1] == "float32" and command[command.index("--device") + 1] == "cpu"
    assert server_env(spec)["PYTHONPATH"].split(os.pathsep)[0] == str(SGLANG_CPU_STAND_IN)
    gpu = ServerSpec(name="t", backend="sglang", model_path=str(tmp_path), port=30000, dtype="bfloat16")
    assert "--device" not in server_command(gpu) and "bfloat16" in server_command(gpu)
    assert str(SGLANG_CPU_STAND_IN) not in server_env(gpu).get("PYTHONPATH", "")
    with pytest.raises(ValueError, match="device='tpu'"):
        ServerSpec(name="t", backend="sglang", model_path="/m", port=1, device="tpu")
