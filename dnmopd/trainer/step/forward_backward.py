"""The student's forward and backward through megatron's pipeline schedules, with the fused LM-head losses.

Micro-batches are packed (THD: each one's sequences back to back in one row, so no padding token is computed;
pipeline stages exchange tensors of each micro-batch's own length through megatron's `variable_seq_lengths`)
unless `packing` is off, which keeps the right-padded micro-batches. The last pipeline stage stops at the final
hidden states; only the positions that predict response tokens are gathered, passed through megatron's
`copy_to_tensor_model_parallel_region` (so grad_hidden, a partial sum over this rank's vocab shard, is
all-reduced over TP exactly once) and into a fused kernel together with this rank's shard of the output weight.
No [tokens, vocab] logits exist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from dnmopd.trainer.collectives import all_reduce_sum
from dnmopd.trainer.step.batch import MicroBatch, TrainBatch


@dataclass
class TokenView:
    """The response tokens of a micro-batch, flattened: N = real response tokens."""

    hidden: torch.Tensor  # [N, h] (TP-mapped)
    rows: torch.Tensor  # [N] row of each token in the micro-batch
    cols: torch.Tensor  # [N] response position t
    targets: torch.Tensor  # [N] token ids


def response_tokens(mb: MicroBatch, hidden: torch.Tensor, tp_group) -> TokenView:
    from megatron.core.tensor_parallel import copy_to_tensor_model_parallel_region

    batch = mb.batch.to(hidden.device)
    rows, cols = batch.response_mask.nonzero(as_tuple=True)
    positions = batch.prompt_lens[rows] + cols
    selected = hidden[mb.locate(rows, positions - 1)]
    if tp_group is not None and tp_group.size() > 1:
        selected = copy_to_tensor_model_parallel_region(selected, group=tp_group)
    return TokenView(selected, rows, cols, batch.tokens[rows, positions])


def split_micro_batches(batch: TrainBatch, max_tokens: int, *, packing: bool, pipeline: int = 1,
                        interleaved: bool = False) -> list[MicroBatch]:
    """The micro-batches the student runs `batch` in: packed, or padded (to the batch's longest row for every
    micro-batch when pipelined: one shape between stages); a multiple of the stages for the interleaved schedule."""
    multiple_of = pipeline if interleaved else 1
    if packing:
        return batch.packed_micro_batches(max_tokens, multiple_of=multiple_of)
    return batch.padded_micro_batches(max_tokens, uniform=pipeline > 1, multiple_of=multiple_of)


class StudentForward:
    """Runs micro-batches of a TrainBatch through the student and a per-micro-batch loss on the last stage."""

    def __init__(self, student, model: list, micro_batch_tokens: int, *, packing: bool = True):
        self.student = student
        self.model = model  # the chunks the schedule runs (DDP-wrapped when training)
        self.micro_batch_tokens = micro_batch_tokens
        self.packing = packing
        self.dims = student.dims

    @property
    def output_chunk(self):
        return self.student.chunks[-1]

    def micro_batches(self, batch: TrainBatch) -> list[MicroBatch]:
        return split_micro_batches(batch, self.micro_batch_tokens, packing=self.packing,
                                   pipeline=self.dims.pp_size, interleaved=len(self.model) > 1)

    def run(self, batch: TrainBatch, loss_fn: Callable[[TrainBatch, TokenView], tuple], *,
            forward_only: bool) -> list:
        """loss_fn(micro_batch, tokens) -> (loss, metrics dict) on the last stage. Returns the metrics dicts of
        every micro-batch (last stage only; empty elsewhere), with `rows` mapped back to rows of `batch`."""
        from megatron.core.pipeline_parallel import get_forward_backward_func

        from dnmopd.student.model import PackedSequences

        num_chunks = len(self.model)
        micro = self.micro_batches(batch)
        device = next(self.student.chunks[0].parameters()).device
        tp_group = self.dims.pg.tp

        def forward_step(data_iterator, model):
            mb = next(data_iterator)
            packed = PackedSequences.from_lengths(mb.lengths, device) if mb.packed else None
            output = model(mb.input_ids().to(device), packed=packed, return_hidden_states=True)

            def loss_func(hidden, non_loss_data=False):
                loss, metrics = loss_fn(mb.batch, response_tokens(mb, hidden, tp_group))
                metrics["rows"] = mb.index.to(metrics["rows"].device)[metrics["rows"]]
                return loss, torch.ones((), dtype=torch.int, device=loss.device), metrics

            return output, loss_func

        iterators = [iter(micro) for _ in range(num_chunks)]
        schedule = get_forward_backward_func()
        first_shape = micro[0].input_ids().shape
        return schedule(
            forward_step_func=forward_step,
            data_iterator=iterators if num_chunks > 1 else iterators[0],
            model=self.model if num_chunks > 1 else self.model[0],
            num_microbatches=len(micro),
            seq_length=first_shape[1],  # with variable_seq_lengths, only a hint: stages exchange each shape
            micro_batch_size=first_shape[0],
            forward_only=forward_only,
        )


def logp_matrix(batch: TrainBatch, pieces: list[dict]) -> torch.Tensor:
    """Scatter per-micro-batch `logp` pieces (tokens at batch `rows`, response positions `cols`) into [B, T]."""
    out = torch.zeros(batch.response_mask.shape)
    for piece in pieces:
        out[piece["rows"].cpu(), piece["cols"].cpu()] = piece["logp"].float().cpu()
    return out


def sum_metrics(pieces: list[dict], sizes: dict[str, int], *groups) -> dict[str, torch.Tensor]:
    """Sum metrics of `sizes[key]` elements over micro-batches, then over each process group in `groups`. Every
    rank calls it; ranks without pieces (not the last pipeline stage, or no such metric) contribute zeros."""
    flat = torch.cat([sum((torch.as_tensor(p[k]).detach().double().cpu().reshape(-1) for p in pieces if k in p),
                          torch.zeros(n, dtype=torch.float64)) for k, n in sizes.items()])
    return dict(zip(sizes, all_reduce_sum(flat, *groups).split(list(sizes.values())), strict=True))
