"""`rotary_embedding` with the signature and in-place semantics of vLLM's custom op, in plain torch."""

import torch


def rotary_embedding(
    positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
    cos_sin_cache: torch.Tensor, is_neox: bool,
) -> None:
    """Rotate, in place, the first `rotary_dim` features of every head of `query` and `key`.

    `query` / `key` are [tokens, heads * head_size] (or [tokens, heads, head_size]); `cos_sin_cache` is
    [max_position, rotary_dim] holding cos in its first half and sin in its second. Neox style rotates the
    two halves of the rotary features against each other, GPT-J style the even/odd pairs.
    """
    cos, sin = cos_sin_cache[positions.flatten().long()].chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    half = cos.shape[-1]
    for x in (query, key):
        if x is None:
            continue
        heads = x.view(positions.numel(), -1, head_size)
        rotary = heads[..., : 2 * half]
        first, second = (rotary[..., :half], rotary[..., half:]) if is_neox else (rotary[..., 0::2], rotary[..., 1::2])
        new_first = first * cos - second * sin
        new_second = second * cos + first * sin
        first.copy_(new_first)
        second.copy_(new_second)
