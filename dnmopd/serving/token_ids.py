"""Token-id validation before anything is sent to a server.

SGLang 0.5.23 does not validate input ids: an id >= vocab_size or < 0 reaches the embedding, the scheduler
raises IndexError and the whole server exits without answering (recorded in the wire fixtures). vLLM answers
400. Either way the bug is ours, so ids are checked here first and the error names the offending position.
"""

from __future__ import annotations

from collections.abc import Sequence


class InvalidTokenIds(ValueError):
    """A token id outside [0, vocab_size)."""


def validate_token_ids(token_ids: Sequence[int], vocab_size: int, *, what: str) -> list[int]:
    """Return `token_ids` as a list of Python ints after checking 0 <= id < vocab_size.

    `what` names the sequence in the error (e.g. "sample 3 of teacher math").
    """
    ids = [int(t) for t in token_ids]
    if not ids:
        raise InvalidTokenIds(f"{what}: empty token sequence")
    for position, token in enumerate(ids):
        if token < 0 or token >= vocab_size:
            raise InvalidTokenIds(
                f"{what}: token id {token} at position {position} is outside the vocabulary [0, {vocab_size})"
            )
    return ids
