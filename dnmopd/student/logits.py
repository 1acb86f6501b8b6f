"""Forward-only evaluation of the student through megatron's pipeline schedules.

Used to compare full-vocabulary logits against Hugging Face (release verification, tests). Training uses
the same schedules with the fused loss instead (``dnmopd.trainer``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def gather_vocab(logits: torch.Tensor, tp_group, vocab_size: int) -> torch.Tensor:
    """Concatenate vocab-parallel logits ``[..., V_padded / tp]`` over TP and drop the padding rows."""
    if tp_group.size() > 1:
        parts = [torch.empty_like(logits) for _ in range(tp_group.size())]
        dist.all_gather(parts, logits.contiguous(), group=tp_group)
        logits = torch.cat(parts, dim=-1)
    return logits[..., :vocab_size]


@torch.no_grad()
def forward_logits(student, input_ids: torch.Tensor) -> torch.Tensor | None:
    """Full, unpadded logits ``[b, s, V]`` on the last pipeline stage (every TP rank), None elsewhere.

    All ranks of the model-parallel group call it with the same ``input_ids [b, s]``.
    """
    from megatron.core.pipeline_parallel import get_forward_backward_func

    chunks = student.chunks
    for chunk in chunks:
        chunk.eval()
    device = next(chunks[0].parameters()).device
    input_ids = input_ids.to(device)
    num_microbatches = student.dims.pp_size if len(chunks) > 1 else 1  # the interleaved schedule needs >= pp

    def loss_func(output, non_loss_data=False):
        return gather_vocab(output, student.dims.pg.tp, student.arch.vocab_size)

    def forward_step(data_iterator, model):
        return model(next(data_iterator)), loss_func

    iterators = [iter([input_ids] * num_microbatches) for _ in chunks]
    schedule = get_forward_backward_func()
    outputs = schedule(
        forward_step_func=forward_step,
        data_iterator=iterators if len(chunks) > 1 else iterators[0],
        model=chunks if len(chunks) > 1 else chunks[0],
        num_microbatches=num_microbatches,
        seq_length=input_ids.shape[1],
        micro_batch_size=input_ids.shape[0],
        forward_only=True,
        collect_non_loss_data=True,
    )
    return outputs[0] if student.is_last_stage else None
