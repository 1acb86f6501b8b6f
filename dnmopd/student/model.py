"""The student: megatron's ``GPTModel`` whose last pipeline stage can stop at the final hidden states.

The fused LM-head kernels (``dnmopd.kernels``) compute log-probs from the final hidden states (after the
final norm) and this rank's vocab shard of the output weight, so the ``[tokens, vocab]`` logits never
exist. ``forward(..., return_hidden_states=True)`` returns those states and :meth:`output_shard` the
matching weight rows.

Shapes: ``input_ids [b, s]`` (right-padded; positions are 0..s-1), or packed (THD): ``input_ids [1, t]`` holding
several sequences back to back, described by :class:`PackedSequences` (every layer restarts at each sequence:
attention, rotary positions, the GDN convolution and recurrence). First/middle pipeline stages return the
activations ``[s, b, h]`` to send on; the last stage returns logits ``[b, s, V_padded / tp]`` or hidden
states ``[b, s, h]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from megatron.core.models.gpt import GPTModel
from megatron.core.packed_seq_params import PackedSeqParams

from dnmopd.student.arch import StudentArch


@dataclass(frozen=True)
class OutputShard:
    """This TP rank's rows of the output (LM-head) weight, restricted to real (unpadded) token ids.

    ``logits[..., j] = hidden @ weight[j]`` is the logit of token ``vocab_start + j``. ``weight`` is a view
    of the parameter (the input embedding when embeddings are tied), so gradients reach it.
    """

    weight: torch.Tensor  # [rows, h]
    vocab_start: int
    vocab_size: int  # the global (unpadded) vocabulary size


@dataclass
class PackedSequences(PackedSeqParams):
    """megatron's THD packed-sequence parameters plus the lengths on the host.

    megatron's layers and Transformer Engine read ``cu_seqlens_*`` and ``max_seqlen_*``; the pure-torch paths
    (our SDPA attention, the GDN convolution and chunked delta rule) split by ``lengths`` without a device sync.
    """

    lengths: tuple[int, ...] = ()

    @classmethod
    def from_lengths(cls, lengths: Sequence[int], device: torch.device | str) -> PackedSequences:
        lengths = tuple(int(n) for n in lengths)
        if not lengths or min(lengths) < 1:
            raise ValueError(f"packed sequences need at least one sequence and lengths >= 1, got {lengths}")
        cu_seqlens = torch.tensor([0, *lengths], dtype=torch.int32).cumsum(0, dtype=torch.int32).to(device)
        longest = max(lengths)
        return cls(qkv_format="thd", cu_seqlens_q=cu_seqlens, cu_seqlens_kv=cu_seqlens, max_seqlen_q=longest,
                   max_seqlen_kv=longest, lengths=lengths)


def packed_lengths(params: PackedSeqParams) -> list[int]:
    """Sequence lengths of self-attention THD parameters (read from the host copy when there is one)."""
    if params.qkv_format != "thd":
        raise ValueError(f"packed sequences must use qkv_format 'thd', got {params.qkv_format!r}")
    if isinstance(params, PackedSequences):
        return list(params.lengths)
    if params.cu_seqlens_q_padded is not None and not torch.equal(params.cu_seqlens_q_padded, params.cu_seqlens_q):
        raise ValueError("padded packed sequences (cu_seqlens_q_padded != cu_seqlens_q) are not supported")
    return params.cu_seqlens_q.diff().tolist()


class StudentModel(GPTModel):
    """GPTModel + ``return_hidden_states`` + :meth:`output_shard`; built by ``dnmopd.student.build``."""

    def __init__(self, *args, arch: StudentArch, **kwargs):
        super().__init__(*args, **kwargs)
        self.arch = arch

    def forward(self, input_ids: torch.Tensor, *, packed: PackedSequences | None = None,
                return_hidden_states: bool = False) -> torch.Tensor:
        """Causal forward over right-padded ``input_ids [b, s]``, or over the sequences ``packed`` into
        ``input_ids [1, t]`` (see the module docstring for outputs).

        Middle and last pipeline stages read their input from ``set_input_tensor`` (megatron's schedules do
        this); ``input_ids`` is still needed there for its shape.
        """
        if packed is not None and (input_ids.shape[0] != 1 or sum(packed.lengths) != input_ids.shape[1]):
            raise ValueError(
                f"packed input_ids must be [1, {sum(packed.lengths)}] (the sum of the sequence lengths), "
                f"got {list(input_ids.shape)}"
            )
        preprocessed = self._preprocess(input_ids=input_ids, position_ids=None, packed_seq_params=packed)
        decoder_input, rotary_pos_emb = preprocessed[0], preprocessed[1]
        hidden = self.decoder(hidden_states=decoder_input, attention_mask=None, rotary_pos_emb=rotary_pos_emb,
                              packed_seq_params=packed)
        if not self.post_process:
            return hidden
        if return_hidden_states:
            return hidden.transpose(0, 1).contiguous()
        weight = self.shared_embedding_or_output_weight() if self.share_embeddings_and_output_weights else None
        logits, _ = self.output_layer(hidden, weight=weight)
        return logits.transpose(0, 1).contiguous()

    def output_shard(self) -> OutputShard:
        """The vocab-parallel output weight of this rank (last pipeline stage only)."""
        if not self.post_process:
            raise RuntimeError("output_shard() is only available on the last pipeline stage")
        if self.share_embeddings_and_output_weights:
            weight = self.shared_embedding_or_output_weight()
        else:
            weight = self.output_layer.weight
        rows = weight.shape[0]
        start = self.pg_collection.tp.rank() * rows
        valid = max(0, min(rows, self.arch.vocab_size - start))
        return OutputShard(weight=weight[:valid], vocab_start=start, vocab_size=self.arch.vocab_size)
