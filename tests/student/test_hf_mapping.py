"""HF <-> megatron layouts, checked against layouts written out element by element."""

from __future__ import annotations

import pytest
import torch

from dnmopd.examples.tiny import _text_config
from dnmopd.student.arch import StudentArch
from dnmopd.student.hf_mapping import hf_language_model_keys, layer_rules, top_rules


def _arch(arch="qwen3_5", **overrides) -> StudentArch:
    text = _text_config(arch, 300, False, 4, overrides)
    text["model_type"] = "qwen3" if arch == "qwen3" else "qwen3_5_text"
    return StudentArch.from_hf_config(text)


def _labelled(rows: int, cols: int = 3) -> torch.Tensor:
    """Row r holds the value r in every column: layouts become readable as row-index lists."""
    return torch.arange(rows, dtype=torch.float32)[:, None].expand(rows, cols).clone()


def _rows(t: torch.Tensor) -> list[int]:
    return t[:, 0].long().tolist()


@pytest.mark.parametrize("gated", [True, False])
def test_qkv_group_major_layout(gated):
    arch = _arch() if gated else _arch("qwen3")
    heads, groups, hd = arch.num_attention_heads, arch.num_query_groups, arch.head_dim
    q_rows = heads * hd * (2 if gated else 1)
    q, k, v = _labelled(q_rows), _labelled(groups * hd) + 1000, _labelled(groups * hd) + 2000
    rule = layer_rules(arch, 3)["self_attention.linear_qkv.weight"]
    full = rule.to_local([q, k, v], 0, 1)
    expected = []
    per_group = heads // groups
    for group in range(groups):
        heads_of_group = range(group * per_group, (group + 1) * per_group)
        if gated:  # HF q_proj rows per head: [query (hd); gate (hd)]
            expected += [h * 2 * hd + i for h in heads_of_group for i in range(hd)]
            expected += [h * 2 * hd + hd + i for h in heads_of_group for i in range(hd)]
        else:
            expected += [h * hd + i for h in heads_of_group for i in range(hd)]
        expected += [1000 + group * hd + i for i in range(hd)] + [2000 + group * hd + i for i in range(hd)]
    assert _rows(full) == expected
    assert [torch.equal(a, b) for a, b in zip(rule.to_hf([full]), (q, k, v), strict=True)] == [True] * 3


def test_gdn_in_proj_per_rank_layout():
    arch = _arch()
    d = arch.gdn
    qkv, z = _labelled(2 * d.qk_dim + d.v_dim), _labelled(d.v_dim) + 1000
    b, a = _labelled(d.num_value_heads) + 2000, _labelled(d.num_value_heads) + 3000
    rule = layer_rules(arch, 0)["self_attention.in_proj.weight"]
    tp = 2
    shards = [rule.to_local([qkv, z, b, a], rank, tp) for rank in range(tp)]
    for rank, shard in enumerate(shards):
        qk, vd, nv = d.qk_dim // tp, d.v_dim // tp, d.num_value_heads // tp
        expected = (
            list(range(rank * qk, (rank + 1) * qk))  # q_r
            + list(range(d.qk_dim + rank * qk, d.qk_dim + (rank + 1) * qk))  # k_r
            + list(range(2 * d.qk_dim + rank * vd, 2 * d.qk_dim + (rank + 1) * vd))  # v_r
            + list(range(1000 + rank * vd, 1000 + (rank + 1) * vd))  # z_r
            + list(range(2000 + rank * nv, 2000 + (rank + 1) * nv))  # beta_r
            + list(range(3000 + rank * nv, 3000 + (rank + 1) * nv))  # alpha_r
        )
        assert _rows(shard) == expected
    assert all(torch.equal(x, y) for x, y in zip(rule.to_hf(shards), (qkv, z, b, a), strict=True))


def test_conv_swiglu_and_vocab_layouts():
    arch = _arch()
    d = arch.gdn
    conv = _labelled(2 * d.qk_dim + d.v_dim).unsqueeze(1)  # [channels, 1, 3]
    rule = layer_rules(arch, 0)["self_attention.conv1d.weight"]
    shard = rule.to_local([conv], 1, 2)[:, 0]
    qk, vd = d.qk_dim // 2, d.v_dim // 2
    assert _rows(shard) == list(range(qk, 2 * qk)) + list(range(d.qk_dim + qk, d.qk_dim + 2 * qk)) + list(
        range(2 * d.qk_dim + vd, 2 * d.qk_dim + 2 * vd)
    )
    gate, up = _labelled(arch.ffn_hidden_size), _labelled(arch.ffn_hidden_size) + 1000
    fc1 = layer_rules(arch, 0)["mlp.linear_fc1.weight"].to_local([gate, up], 1, 2)
    half = arch.ffn_hidden_size // 2
    assert _rows(fc1) == list(range(half, 2 * half)) + list(range(1000 + half, 1000 + 2 * half))
    embed = _labelled(300)
    vocab = top_rules(arch, 512)["embedding.word_embeddings.weight"]
    shards = [vocab.to_local([embed], r, 2) for r in range(2)]
    assert _rows(shards[1])[:44] == list(range(256, 300)) and shards[1][44:].abs().sum() == 0
    assert torch.equal(vocab.to_hf(shards)[0], embed)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_every_rule_round_trips_bit_exactly(tp):
    arch = _arch(num_attention_heads=8, num_key_value_heads=4, linear_num_key_heads=4, linear_num_value_heads=8)
    gen = torch.Generator().manual_seed(0)
    shapes = _hf_shapes(arch)
    for layer in range(arch.num_layers):
        for name, rule in layer_rules(arch, layer).items():
            tensors = [torch.randn(shapes[n], generator=gen) + (1.0 if "norm" in n else 0.0) for n in rule.hf_names]
            back = rule.to_hf([rule.to_local(tensors, r, tp) for r in range(tp)])
            assert all(torch.equal(x, y) for x, y in zip(back, tensors, strict=True)), name


def _hf_shapes(arch: StudentArch) -> dict[str, tuple[int, ...]]:
    from dnmopd.examples.tiny import _new_model

    text = dict(arch.hf_config)
    text.pop("model_type")
    model = _new_model(arch.family, text, vision_language=False)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def test_language_model_keys_match_transformers():
    for family in ("qwen3", "qwen3_5"):
        arch = _arch(family)
        assert sorted(hf_language_model_keys(arch)) == sorted(_hf_shapes(arch))
