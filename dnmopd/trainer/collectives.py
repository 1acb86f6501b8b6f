"""Small collectives on CPU tensors that work under gloo (CPU) and NCCL (which only moves CUDA tensors)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def active(group) -> bool:
    return group is not None and dist.is_initialized() and dist.get_world_size(group) > 1


def device_of(group) -> torch.device:
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(values: torch.Tensor, *groups) -> torch.Tensor:
    """Sum a CPU tensor over each group in turn; returns a CPU tensor."""
    for group in groups:
        if active(group):
            moved = values.to(device_of(group))
            dist.all_reduce(moved, group=group)
            values = moved.cpu()
    return values


def all_reduce_max(values: torch.Tensor, group) -> torch.Tensor:
    """Element-wise maximum of a CPU tensor over a group; returns a CPU tensor."""
    if active(group):
        moved = values.to(device_of(group))
        dist.all_reduce(moved, op=dist.ReduceOp.MAX, group=group)
        values = moved.cpu()
    return values


def broadcast_tensor(tensor: torch.Tensor | None, shape, dtype, src: int, group) -> torch.Tensor:
    """Broadcast a tensor from global rank `src` (others pass None and the expected shape and dtype)."""
    wire = torch.uint8 if dtype == torch.bool else dtype
    device = device_of(group)
    if dist.get_rank() == src:
        buffer = tensor.to(device=device, dtype=wire).contiguous()
    else:
        buffer = torch.empty(shape, dtype=wire, device=device)
    dist.broadcast(buffer, src=src, group=group)
    return buffer.cpu().to(dtype)


def broadcast_object(obj, src: int, group):
    box = [obj]
    dist.broadcast_object_list(box, src=src, group=group)
    return box[0]
