"""Megatron slot adapters with Qwen's exact numerics: the RMSNorm and a torch SDPA core attention.

Both accept the keyword arguments megatron-core's builders pass (``config``, ``hidden_size``, ``eps`` for
norms; ``config``, ``layer_number``, ``attn_mask_type``, ... for core attention), in 0.16 and 0.19 alike.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.transformer_config import TransformerConfig

from dnmopd.student.model import packed_lengths


def _param_device(config: TransformerConfig) -> torch.device:
    if config.use_cpu_initialization or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


class RMSNorm(torch.nn.Module):
    """RMSNorm over the last dim, normalised in float32, as Hugging Face Qwen computes it.

    With ``config.layernorm_zero_centered_gamma`` (Qwen3.5) the scale is ``1 + weight`` applied in float32
    before casting back; otherwise (Qwen3) the normalised input is cast back and then scaled by ``weight``.
    """

    def __init__(self, config: TransformerConfig, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.zero_centered = config.layernorm_zero_centered_gamma
        self.eps = eps
        init = torch.zeros if self.zero_centered else torch.ones
        self.weight = torch.nn.Parameter(
            init(hidden_size, dtype=config.params_dtype, device=_param_device(config))
        )
        self.weight.sequence_parallel = config.sequence_parallel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.zero_centered:
            return (normed * (1.0 + self.weight.float())).to(x.dtype)
        return self.weight * normed.to(x.dtype)


class TorchSDPAttention(MegatronModule):
    """Causal core attention through ``torch.nn.functional.scaled_dot_product_attention``.

    Input ``query [sq, b, np, hn]``, ``key``/``value [sk, b, ng, hn]`` (grouped-query heads are shared
    by consecutive query heads, as in megatron and Hugging Face); output ``[sq, b, np * hn]``. Packed
    sequences (THD, ``packed_seq_params``): ``query [t, np, hn]``, ``key``/``value [t, ng, hn]``, output
    ``[t, np * hn]``, each sequence attending causally to itself only (one SDPA call per sequence, so no
    ``[t, t]`` mask exists). Uses the flash/memory-efficient kernels on GPU and the math kernel on CPU.
    Only causal self-attention over right-padded or packed batches (no explicit mask, no context
    parallelism) is supported.
    """

    def __init__(
        self,
        config: TransformerConfig,
        layer_number: int,
        attn_mask_type: AttnMaskType,
        attention_type: str = "self",
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        cp_comm_type: str | None = None,
        pg_collection=None,
    ):
        super().__init__(config=config)
        if attn_mask_type != AttnMaskType.causal or attention_type != "self":
            raise ValueError(f"TorchSDPAttention supports causal self-attention only, got {attn_mask_type}")
        if config.context_parallel_size > 1:
            raise ValueError("TorchSDPAttention does not support context parallelism")
        self.softmax_scale = softmax_scale
        self.dropout = config.attention_dropout if attention_dropout is None else attention_dropout

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_mask_type: AttnMaskType | None = None,
        attention_bias: torch.Tensor | None = None,
        packed_seq_params=None,
    ) -> torch.Tensor:
        if attention_mask is not None or attention_bias is not None:
            raise NotImplementedError(
                "the student attends causally over right-padded or packed batches: pass attention_mask=None"
            )
        if packed_seq_params is not None:
            pieces = zip(*(t.split(packed_lengths(packed_seq_params)) for t in (query, key, value)), strict=True)
            return torch.cat([self._causal(*(t.unsqueeze(1) for t in piece)).squeeze(1) for piece in pieces])
        return self._causal(query, key, value)

    def _causal(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, heads, s, hn]
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=True,
            scale=self.softmax_scale,
            enable_gqa=k.shape[1] != q.shape[1],
        )
        seq, batch = query.shape[0], query.shape[1]
        return out.permute(2, 0, 1, 3).reshape(seq, batch, -1)
