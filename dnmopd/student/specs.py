"""ModuleSpecs of the student's decoder layers, built from megatron-core's parallel layers.

Two spec providers fill megatron's slots: :class:`LocalStudentSpecProvider` (megatron's own tensor-parallel
linears, torch SDPA attention; runs anywhere) and :class:`TEStudentSpecProvider` (Transformer Engine linears
and attention when TE is importable). Both keep the norms separate (never TE's fused layernorm-linear), with
Qwen's exact RMSNorm, so parameter names and checkpoints are the same for either backend.

Qwen3 layer: RMSNorm -> GQA self-attention (QK RMSNorm, RoPE) -> RMSNorm -> SwiGLU MLP.
Qwen3.5 layer: the same with either gated attention (sigmoid output gate, partial RoPE) or Gated DeltaNet
as the mixer, per ``layer_types``; every norm is zero-centred ("1 + w").
"""

from __future__ import annotations

from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
from megatron.core.models.backends import LocalSpecProvider
from megatron.core.models.gpt.gpt_layer_specs import get_mlp_module_spec_for_backend
from megatron.core.transformer.attention import SelfAttention, SelfAttentionSubmodules
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.transformer_layer import (
    TransformerLayer,
    TransformerLayerSubmodules,
    get_transformer_layer_offset,
)

from dnmopd.student.arch import StudentArch
from dnmopd.student.gated_delta_net import GatedDeltaNet, GatedDeltaNetSubmodules
from dnmopd.student.layers import RMSNorm, TorchSDPAttention

try:
    import transformer_engine  # noqa: F401
    from megatron.core.extensions.transformer_engine_spec_provider import TESpecProvider

    HAVE_TE = True
except ImportError:  # Transformer Engine is optional
    TESpecProvider = object
    HAVE_TE = False


class LocalStudentSpecProvider(LocalSpecProvider):
    """megatron's local tensor-parallel layers with torch SDPA core attention and Qwen's RMSNorm."""

    def core_attention(self) -> type:
        return TorchSDPAttention

    def layer_norm(self, rms_norm: bool = True, for_qk: bool = False, has_residual: bool = False) -> type:
        return RMSNorm


class TEStudentSpecProvider(TESpecProvider):
    """Transformer Engine linears and attention; norms stay unfused (Qwen's RMSNorm)."""

    def fuse_layernorm_and_linear(self) -> bool:
        return False

    def layer_norm(self, rms_norm: bool = True, for_qk: bool = False, has_residual: bool = False) -> type:
        return RMSNorm


def spec_provider(transformer_impl: str):
    """"local" or "transformer_engine" (the latter needs TE importable)."""
    if transformer_impl == "transformer_engine":
        if not HAVE_TE:
            raise RuntimeError("transformer_impl 'transformer_engine' requested but transformer_engine is missing")
        return TEStudentSpecProvider()
    if transformer_impl == "local":
        return LocalStudentSpecProvider()
    raise ValueError(f"transformer_impl must be 'local' or 'transformer_engine', got {transformer_impl!r}")


def attention_spec(provider) -> ModuleSpec:
    """Megatron SelfAttention: fused group-major qkv(+gate) projection, QK norm, RoPE, core attention."""
    return ModuleSpec(
        module=SelfAttention,
        params={"attn_mask_type": AttnMaskType.causal},
        submodules=SelfAttentionSubmodules(
            linear_qkv=provider.column_parallel_linear(),
            core_attention=provider.core_attention(),
            linear_proj=provider.row_parallel_linear(),
            q_layernorm=provider.layer_norm(for_qk=True),
            k_layernorm=provider.layer_norm(for_qk=True),
        ),
    )


def gated_delta_net_spec(provider, *, gdn_backend: str, chunk_size: int) -> ModuleSpec:
    return ModuleSpec(
        module=GatedDeltaNet,
        params={"gdn_backend": gdn_backend, "chunk_size": chunk_size},
        submodules=GatedDeltaNetSubmodules(
            in_proj=provider.column_parallel_linear(),
            out_norm=provider.layer_norm(),
            out_proj=provider.row_parallel_linear(),
        ),
    )


def layer_spec(mixer: ModuleSpec, provider) -> ModuleSpec:
    norm = provider.layer_norm()
    return ModuleSpec(
        module=TransformerLayer,
        submodules=TransformerLayerSubmodules(
            input_layernorm=norm,
            self_attention=mixer,
            self_attn_bda=get_bias_dropout_add,
            pre_mlp_layernorm=norm,
            mlp=get_mlp_module_spec_for_backend(backend=provider),
            mlp_bda=get_bias_dropout_add,
        ),
    )


def decoder_block_spec(
    arch: StudentArch,
    config: TransformerConfig,
    provider,
    *,
    pp_rank: int,
    vp_stage: int | None,
    gdn_backend: str = "auto",
    gdn_chunk_size: int = 64,
) -> TransformerBlockSubmodules:
    """Layer specs of the layers this pipeline stage (and virtual stage) builds, in global order."""
    attention_layer = layer_spec(attention_spec(provider), provider)
    linear_layer = None
    if arch.gdn is not None:
        mixer = gated_delta_net_spec(provider, gdn_backend=gdn_backend, chunk_size=gdn_chunk_size)
        linear_layer = layer_spec(mixer, provider)
    offset = get_transformer_layer_offset(config, vp_stage=vp_stage, pp_rank=pp_rank)
    count = get_num_layers_to_build(config, vp_stage=vp_stage, pp_rank=pp_rank)
    specs = [linear_layer if arch.is_linear(i) else attention_layer for i in range(offset, offset + count)]
    return TransformerBlockSubmodules(layer_specs=specs, layer_norm=provider.layer_norm())
