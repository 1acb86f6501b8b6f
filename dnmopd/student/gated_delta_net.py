"""Gated DeltaNet token mixer as a megatron ``self_attention`` slot, tensor-parallel over heads.

Parameters, their TP sharding and the distributed-checkpoint layout are those of megatron-core's own
``GatedDeltaNet`` (``in_proj`` rows per TP rank ``[q; k; v; z; beta; alpha]``, ``conv1d`` channels
``[q; k; v]``, ``A_log``/``dt_bias`` split by value heads, ``out_norm`` zero-centred so that it stores the
Hugging Face weight minus one), so checkpoints reshard across TP sizes. Unlike megatron's module it does not
require FLA or Transformer Engine: the delta rule runs through ``dnmopd.student.gated_delta_rule`` (FLA's
chunk kernel on CUDA when installed and usable, the pure-torch chunked form elsewhere).

Forward: ``hidden_states [s, b, h] -> (output [s, b, h], None)``, sequences right-padded (the recurrence runs
left to right, so trailing padding never affects real tokens) or packed into one row (``packed_seq_params``,
``b == 1``): the causal convolution and the delta-rule state then restart at every sequence start.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.spec_utils import build_module
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.utils import (
    ensure_metadata_has_dp_cp_group,
    make_sharded_tensors_for_checkpoint,
    sharded_state_dict_default,
)

from dnmopd.student.gated_delta_rule import gated_delta_rule
from dnmopd.student.layers import _param_device
from dnmopd.student.model import packed_lengths

try:  # megatron-core >= 0.19
    from megatron.core.ssm.utils import _split_tensor_factory
except ImportError:  # megatron-core 0.16
    from megatron.core.ssm.mamba_mixer import _split_tensor_factory

IN_PROJ_PARTS = ("query", "key", "value", "z", "beta", "alpha")


def causal_conv1d(x: torch.Tensor, weight: torch.Tensor, lengths: list[int] | None = None) -> torch.Tensor:
    """Depthwise causal convolution ``x [b, channels, s]`` with ``weight [channels, 1, K]``, zero history.

    ``lengths``: sequences packed along s (``b == 1``), each with its own zero history: they are laid out with
    ``K - 1`` zeros before each one, so the window of a sequence's first tokens never reaches the previous one.
    """
    kernel = weight.shape[-1]
    if lengths is None:
        return F.conv1d(x, weight, padding=kernel - 1, groups=weight.shape[0])[..., : x.shape[-1]]
    sequence = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)).to(x.device)
    slots = torch.arange(x.shape[-1], device=x.device) + (kernel - 1) * (sequence + 1)
    spaced = x.new_zeros(*x.shape[:-1], x.shape[-1] + (kernel - 1) * len(lengths)).index_copy(-1, slots, x)
    return F.conv1d(spaced, weight, groups=weight.shape[0]).index_select(-1, slots - (kernel - 1))


@dataclass
class GatedDeltaNetSubmodules:
    in_proj: type
    out_norm: type
    out_proj: type


class GatedDeltaNet(MegatronModule):
    """Qwen3.5 linear-attention layer (see the module docstring)."""

    def __init__(
        self,
        config: TransformerConfig,
        submodules: GatedDeltaNetSubmodules,
        layer_number: int | None = None,
        pg_collection=None,
        gdn_backend: str = "auto",
        chunk_size: int = 64,
        cp_comm_type: str | None = None,
        pp_layer_offset: int | None = None,
        name: str | None = None,
    ):
        # cp_comm_type, pp_layer_offset and name are passed by megatron's TransformerLayer; unused here.
        super().__init__(config)
        if pg_collection is None:
            raise ValueError("GatedDeltaNet needs pg_collection")
        if config.sequence_parallel or config.context_parallel_size > 1:
            raise ValueError("GatedDeltaNet supports neither sequence nor context parallelism")
        tp = pg_collection.tp.size()
        self.layer_number = layer_number
        self.backend = gdn_backend
        self.chunk_size = chunk_size
        self.key_head_dim = config.linear_key_head_dim
        self.value_head_dim = config.linear_value_head_dim
        for heads in (config.linear_num_key_heads, config.linear_num_value_heads):
            if heads % tp:
                raise ValueError(f"GDN head count {heads} is not divisible by tensor parallel size {tp}")
        self.num_key_heads = config.linear_num_key_heads // tp
        self.num_value_heads = config.linear_num_value_heads // tp
        qk_dim = self.num_key_heads * self.key_head_dim
        v_dim = self.num_value_heads * self.value_head_dim
        self.in_proj_sections = [qk_dim, qk_dim, v_dim, v_dim, self.num_value_heads, self.num_value_heads]
        self.conv_sections = [qk_dim, qk_dim, v_dim]
        conv_dim = sum(self.conv_sections)
        device = _param_device(config)

        self.in_proj = build_module(
            submodules.in_proj,
            config.hidden_size,
            sum(self.in_proj_sections) * tp,
            config=config,
            init_method=config.init_method,
            gather_output=False,
            bias=False,
            skip_bias_add=False,
            is_expert=False,
            tp_comm_buffer_name="fc1",
            tp_group=pg_collection.tp,
        )
        self.conv1d = torch.nn.Conv1d(
            conv_dim,
            conv_dim,
            kernel_size=config.linear_conv_kernel_dim,
            groups=conv_dim,
            padding=config.linear_conv_kernel_dim - 1,
            bias=False,
            device=device,
            dtype=config.params_dtype,
        )
        self.dt_bias = torch.nn.Parameter(torch.ones(self.num_value_heads, dtype=config.params_dtype, device=device))
        self.A_log = torch.nn.Parameter(torch.empty(self.num_value_heads, dtype=config.params_dtype, device=device))
        for param in (self.conv1d.weight, self.dt_bias, self.A_log):
            set_tensor_model_parallel_attributes(param, is_parallel=True, dim=0, stride=1)
        self.out_norm = build_module(
            submodules.out_norm, config=config, hidden_size=self.value_head_dim, eps=config.layernorm_epsilon
        )
        for param in self.out_norm.parameters():  # one scale for every head, the heads split over TP ranks
            param.summed_over_tensor_parallel = True
        self.out_proj = build_module(
            submodules.out_proj,
            config.linear_num_value_heads * self.value_head_dim,
            config.hidden_size,
            config=config,
            init_method=config.output_layer_init_method,
            bias=False,
            input_is_parallel=True,
            skip_bias_add=True,
            is_expert=False,
            tp_comm_buffer_name="fc2",
            tp_group=pg_collection.tp,
        )
        self.tp_group = pg_collection.tp
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Megatron's GDN init: ``dt_bias = 1``, ``A_log = log(U(1, 16))``, out_norm scale 1."""
        if not self.config.perform_initialization:
            return
        from megatron.core.tensor_parallel import get_cuda_rng_tracker

        with get_cuda_rng_tracker().fork(), torch.no_grad():
            self.dt_bias.fill_(1.0)
            self.A_log.copy_(torch.empty_like(self.A_log).uniform_(1.0, 16.0).log())

    def forward(self, hidden_states, attention_mask=None, inference_context=None, packed_seq_params=None, **_):
        # **_: rotary embeddings and other attention-only arguments that megatron's layer passes along.
        if inference_context is not None:
            raise NotImplementedError("GatedDeltaNet does not support inference caches")
        lengths = None if packed_seq_params is None else packed_lengths(packed_seq_params)
        seq, batch, _hidden = hidden_states.shape
        projected, _ = self.in_proj(hidden_states)
        query, key, value, gate, beta, alpha = torch.split(projected.transpose(0, 1), self.in_proj_sections, -1)

        mixed = torch.cat([query, key, value], dim=-1).transpose(1, 2)  # [b, conv_dim, s]
        mixed = F.silu(causal_conv1d(mixed, self.conv1d.weight, lengths)).transpose(1, 2)
        query, key, value = torch.split(mixed, self.conv_sections, dim=-1)
        query = query.reshape(batch, seq, self.num_key_heads, self.key_head_dim)
        key = key.reshape(batch, seq, self.num_key_heads, self.key_head_dim)
        value = value.reshape(batch, seq, self.num_value_heads, self.value_head_dim)

        decay = -self.A_log.float().exp() * F.softplus(alpha.float() + self.dt_bias.float())
        core = gated_delta_rule(
            query, key, value, decay, beta.sigmoid(), backend=self.backend, chunk_size=self.chunk_size,
            lengths=lengths,
        )
        normed = self.out_norm(core) * F.silu(gate.reshape_as(core).float())
        normed = normed.to(hidden_states.dtype).reshape(batch, seq, -1).transpose(0, 1).contiguous()
        return self.out_proj(normed)

    def sharded_state_dict(self, prefix="", sharded_offsets=(), metadata=None, tp_group=None):
        """Megatron GDN's checkpoint layout: in_proj and conv1d split into named per-part tensors."""
        tp_group = tp_group if tp_group is not None else self.tp_group
        metadata = ensure_metadata_has_dp_cp_group(metadata)
        pgs = {"tp_group": tp_group, "dp_cp_group": metadata["dp_cp_group"]}
        state = {}
        self._save_to_state_dict(state, "", keep_vars=True)
        sharded = make_sharded_tensors_for_checkpoint(
            state, prefix, {"A_log": 0, "dt_bias": 0}, sharded_offsets, **pgs
        )
        for child_name, child in self.named_children():
            if child_name == "conv1d":
                sharded.update(
                    make_sharded_tensors_for_checkpoint(
                        child.state_dict(prefix="", keep_vars=True),
                        f"{prefix}conv1d.",
                        {"weight": 0},
                        sharded_offsets,
                        **pgs,
                    )
                )
            else:
                sharded.update(
                    sharded_state_dict_default(
                        child, f"{prefix}{child_name}.", sharded_offsets, metadata, tp_group=tp_group
                    )
                )
        key = f"{prefix}in_proj.weight"
        sharded[key] = _split_tensor_factory(sharded[key], self.in_proj_sections, list(IN_PROJ_PARTS), 0)
        key = f"{prefix}conv1d.weight"
        sharded[key] = _split_tensor_factory(sharded[key], self.conv_sections, ["query", "key", "value"], 0)
        return sharded
