"""Fused LM-head ops over tensor-parallel vocab shards, installed as ``dnmopd.kernels``.

- ``fused_linear_logprob``: per-token log-prob (and entropy) of sampled tokens from hidden states and a
  vocab-sharded LM head, never materialising ``[N, V]`` logits.
- ``fused_opd_loss``: the same pass fused with the clipped OPD loss and its gradient (3 GEMMs).
- ``fused_reverse_kl``: full-vocab KL(student || teacher) per token, student gradient only.
- ``fused_topk_reverse_kl``: KL(student || teacher) per token over K candidate tokens (a server teacher's
  top-k) and one tail bucket, student gradient only.
- ``domain_stats``: per-domain float64 (responses, tokens, sum, sumsq) of the DN scale statistic.

With ``tp_group`` each rank passes its contiguous vocab shard; ``grad_hidden`` is then this rank's partial
sum, reduced exactly once by the caller's TP mapping (see ``linear_logprob``'s module docstring).

Each op runs its passes over the logits as Triton kernels on CUDA tensors and as their native torch twins
(same file) on any other device; ``DNMOPD_KERNEL_BACKEND`` (auto | native | triton) overrides the choice
(``utils.use_triton``), ``utils.kernel_backend`` does so in a scope.
"""

from .domain_stats import domain_stats
from .linear_logprob import fused_linear_logprob
from .opd_loss import OPDLossOutput, fused_opd_loss
from .reverse_kl import ReverseKLOutput, fused_reverse_kl
from .topk_reverse_kl import TopKReverseKLOutput, fused_topk_reverse_kl

__all__ = [
    "OPDLossOutput",
    "ReverseKLOutput",
    "TopKReverseKLOutput",
    "domain_stats",
    "fused_linear_logprob",
    "fused_opd_loss",
    "fused_reverse_kl",
    "fused_topk_reverse_kl",
]
