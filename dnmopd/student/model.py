"""The student: megatron's ``GPTModel`` whose last pipeline stage can stop at the final hidden states.

The fused LM-head kernels (``dnmopd.kernels``) compute log-probs from the final hidden states (after the
final norm) and this rank's vocab shard of the output weight, so the ``[tokens, vocab]`` logits never
exist. ``forward(..., return_hidden_states=True)`` returns those states and :meth:`output_shard` the
matching weight rows.

Shapes: ``input_ids [b, s]`` (right-padded; positions are 0..s-1); first/middle pipeline stages return the
activations ``[s, b, h]`` to send on; the last stage returns logits ``[b, s, V_padded / tp]`` or hidden
states ``[b, s, h]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from megatron.core.models.gpt import GPTModel

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


class StudentModel(GPTModel):
    """GPTModel + ``return_hidden_states`` + :meth:`output_shard`; built by ``dnmopd.student.build``."""

    def __init__(self, *args, arch: StudentArch, **kwargs):
        super().__init__(*args, **kwargs)
        self.arch = arch

    def forward(self, input_ids: torch.Tensor, *, return_hidden_states: bool = False) -> torch.Tensor:
        """Causal forward over right-padded ``input_ids [b, s]`` (see the module docstring for outputs).

        Middle and last pipeline stages read their input from ``set_input_tensor`` (megatron's schedules do
        this); ``input_ids`` is still needed there for its shape.
        """
        preprocessed = self._preprocess(input_ids=input_ids, position_ids=None)
        decoder_input, rotary_pos_emb = preprocessed[0], preprocessed[1]
        hidden = self.decoder(hidden_states=decoder_input, attention_mask=None, rotary_pos_emb=rotary_pos_emb)
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
