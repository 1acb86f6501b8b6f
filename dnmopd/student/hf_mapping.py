"""Hugging Face <-> megatron weight layouts of the student, one :class:`Rule` per megatron parameter.

A rule names the HF tensors a megatron parameter is made of and converts both ways:
``to_local(hf_tensors, tp_rank, tp_size)`` gives this rank's shard; ``to_hf(shards_of_all_tp_ranks)`` gives
the HF tensors back. The layouts (``qwen35.md`` sections 4 and 8):

* attention ``linear_qkv``: per query group ``[q heads; gate heads (Qwen3.5); k; v]`` rows (HF ``q_proj``
  interleaves ``[q_h; gate_h]`` per head); TP ranks hold contiguous row blocks;
* GDN ``in_proj``: per TP rank ``[q_r; k_r; v_r; z_r; beta_r; alpha_r]``, each the rank's contiguous slice
  of HF's flat ``in_proj_qkv`` (split in Q, K, V), ``in_proj_z``, ``in_proj_b``, ``in_proj_a``;
  ``conv1d`` channels per rank ``[q_r; k_r; v_r]``; ``A_log``/``dt_bias`` split by value heads;
* GDN ``out_norm`` stores the HF weight minus one (megatron applies ``1 + w``); exact whenever the HF value
  is >= 0.5 (Sterbenz), otherwise within one rounding step;
* SwiGLU ``linear_fc1``: per rank ``[gate_r; up_r]``; row-parallel weights split along columns;
* embeddings / LM head: vocabulary rows padded with zeros to the padded size, split in contiguous blocks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from dnmopd.student.arch import StudentArch

Tensor = torch.Tensor
_LAYER = re.compile(r"decoder\.layers\.(\d+)\.(.+)")


@dataclass(frozen=True)
class Rule:
    hf_names: tuple[str, ...]
    to_local: Callable[[list[Tensor], int, int], Tensor]
    to_hf: Callable[[list[Tensor]], list[Tensor]]


def replicated(name: str, offset: float = 0.0) -> Rule:
    """Same tensor on every TP rank; megatron stores ``hf - offset``."""
    if offset:
        return Rule((name,), lambda t, r, n: t[0] - offset, lambda s: [s[0] + offset])
    return Rule((name,), lambda t, r, n: t[0], lambda s: [s[0]])


def split(name: str, dim: int) -> Rule:
    """Contiguous blocks along ``dim`` (0: column-parallel rows / heads, 1: row-parallel columns)."""
    return Rule((name,), lambda t, r, n: t[0].chunk(n, dim)[r], lambda s: [torch.cat(s, dim)])


def vocab_rows(name: str, vocab_size: int, padded: int) -> Rule:
    def to_local(t, rank, size):
        rows = padded // size
        local = t[0].new_zeros(rows, t[0].shape[1])
        real = t[0][rank * rows : min((rank + 1) * rows, vocab_size)]
        local[: real.shape[0]] = real
        return local

    return Rule((name,), to_local, lambda s: [torch.cat(s, 0)[:vocab_size]])


def _per_rank_pieces(names: tuple[str, ...], sections: list[int], pieces_of, hf_of) -> Rule:
    """Each rank holds its slice of every piece, concatenated; ``sections`` are the full piece sizes.

    ``pieces_of(hf_tensors)`` splits the HF tensors into the pieces, ``hf_of(pieces)`` joins them back.
    """

    def to_local(t, rank, size):
        return torch.cat([piece.chunk(size, 0)[rank] for piece in pieces_of(t)], 0)

    def to_hf(shards):
        per_rank = [shard.split([n // len(shards) for n in sections], 0) for shard in shards]
        return hf_of([torch.cat(parts, 0) for parts in zip(*per_rank, strict=True)])

    return Rule(names, to_local, to_hf)


def swiglu(gate: str, up: str, arch: StudentArch) -> Rule:
    return _per_rank_pieces((gate, up), [arch.ffn_hidden_size] * 2, lambda t: t, lambda p: p)


def gdn_in_proj(prefix: str, arch: StudentArch) -> Rule:
    d = arch.gdn
    sections = [d.qk_dim, d.qk_dim, d.v_dim, d.v_dim, d.num_value_heads, d.num_value_heads]
    names = tuple(prefix + f"in_proj_{n}.weight" for n in ("qkv", "z", "b", "a"))
    return _per_rank_pieces(
        names,
        sections,
        lambda t: [*t[0].split(sections[:3], 0), *t[1:]],
        lambda p: [torch.cat(p[:3], 0), *p[3:]],
    )


def gdn_conv(name: str, arch: StudentArch) -> Rule:
    sections = [arch.gdn.qk_dim, arch.gdn.qk_dim, arch.gdn.v_dim]
    return _per_rank_pieces((name,), sections, lambda t: t[0].split(sections, 0), lambda p: [torch.cat(p, 0)])


def qkv(prefix: str, arch: StudentArch) -> Rule:
    heads, groups, hd = arch.num_attention_heads, arch.num_query_groups, arch.head_dim
    per_group, gated = heads // groups, arch.attn_output_gate
    q_blocks = 2 if gated else 1

    def to_full(t):
        q, k, v = t
        hidden = q.shape[-1]
        q = q.view(heads, q_blocks, hd, hidden).transpose(0, 1)  # [q|gate, heads, hd, H]
        blocks = [q[i].reshape(groups, per_group * hd, hidden) for i in range(q_blocks)]
        blocks += [k.view(groups, hd, hidden), v.view(groups, hd, hidden)]
        return torch.cat(blocks, 1).reshape(-1, hidden)

    def to_hf(shards):
        full = torch.cat(shards, 0)
        hidden = full.shape[-1]
        parts = full.view(groups, -1, hidden).split([per_group * hd] * q_blocks + [hd, hd], 1)
        q = torch.stack([p.reshape(heads, hd, hidden) for p in parts[:q_blocks]], 1).reshape(-1, hidden)
        return [q, parts[-2].reshape(-1, hidden), parts[-1].reshape(-1, hidden)]

    names = tuple(prefix + f"{n}_proj.weight" for n in "qkv")
    return Rule(names, lambda t, r, n: to_full(t).chunk(n, 0)[r], to_hf)


def layer_rules(arch: StudentArch, layer: int) -> dict[str, Rule]:
    """Rules of one decoder layer, keyed by the megatron parameter name inside the layer."""
    p = f"{arch.hf_prefix}layers.{layer}."
    rules = {
        "input_layernorm.weight": replicated(p + "input_layernorm.weight"),
        "pre_mlp_layernorm.weight": replicated(p + "post_attention_layernorm.weight"),
        "mlp.linear_fc1.weight": swiglu(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", arch),
        "mlp.linear_fc2.weight": split(p + "mlp.down_proj.weight", 1),
    }
    if arch.is_linear(layer):
        a = p + "linear_attn."
        rules.update({
            "self_attention.in_proj.weight": gdn_in_proj(a, arch),
            "self_attention.conv1d.weight": gdn_conv(a + "conv1d.weight", arch),
            "self_attention.A_log": split(a + "A_log", 0),
            "self_attention.dt_bias": split(a + "dt_bias", 0),
            "self_attention.out_norm.weight": replicated(a + "norm.weight", offset=1.0),
            "self_attention.out_proj.weight": split(a + "out_proj.weight", 1),
        })
    else:
        a = p + "self_attn."
        rules.update({
            "self_attention.linear_qkv.weight": qkv(a, arch),
            "self_attention.q_layernorm.weight": replicated(a + "q_norm.weight"),
            "self_attention.k_layernorm.weight": replicated(a + "k_norm.weight"),
            "self_attention.linear_proj.weight": split(a + "o_proj.weight", 1),
        })
    return rules


def top_rules(arch: StudentArch, padded_vocab: int) -> dict[str, Rule]:
    embed = f"{arch.hf_prefix}embed_tokens.weight"
    head = embed if arch.tie_embeddings else "lm_head.weight"
    return {
        "embedding.word_embeddings.weight": vocab_rows(embed, arch.vocab_size, padded_vocab),
        "decoder.final_layernorm.weight": replicated(f"{arch.hf_prefix}norm.weight"),
        "output_layer.weight": vocab_rows(head, arch.vocab_size, padded_vocab),
    }


def hf_language_model_keys(arch: StudentArch) -> list[str]:
    """Every HF key of the language model, in checkpoint order (embedding, layers, norm, head)."""
    top = top_rules(arch, arch.vocab_size)
    keys = list(top["embedding.word_embeddings.weight"].hf_names)
    for layer in range(arch.num_layers):
        for rule in layer_rules(arch, layer).values():
            keys.extend(rule.hf_names)
    keys.extend(top["decoder.final_layernorm.weight"].hf_names)
    if not arch.tie_embeddings:
        keys.extend(top["output_layer.weight"].hf_names)
    return keys


def rule_for(arch: StudentArch, chunk, name: str, padded_vocab: int) -> tuple[Rule, int]:
    """The rule of parameter ``name`` of model ``chunk`` and its global layer index (-1 / L for top-level)."""
    match = _LAYER.fullmatch(name)
    if match:
        layer = chunk.decoder.layers[int(match.group(1))].layer_number - 1
        rules = layer_rules(arch, layer)
        key = match.group(2)
    else:
        layer = -1 if name.startswith("embedding.") else arch.num_layers
        rules = top_rules(arch, padded_vocab)
        key = name
    if key not in rules:
        raise KeyError(f"no Hugging Face mapping for megatron parameter {name!r} (layer {layer})")
    return rules[key], layer
