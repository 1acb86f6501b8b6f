"""SGLang `/generate` wire format: request bodies and response parsing (checked against SGLang 0.5.23).

Scoring (prefill only). We send prompt + response as `input_ids` with `max_new_tokens: 0`,
`return_logprob: true` and `logprob_start_len = P - 1` (P = prompt length). SGLang truncates its radix
prefix match at `logprob_start_len`, so the value 0 that other trainers send recomputes the whole prompt for
every sample; P - 1 lets the n samples of a prompt share the cached prompt prefix and ships only R + 1
entries. `meta_info.input_token_logprobs` then holds `len(input_ids) - lsl` = R + 1 triples
`[logprob | null, echoed_id, text | null]`, entry j for absolute position lsl + j:

    entry 0   position P-1 (last prompt token): logprob ALWAYS null, whatever lsl is -> dropped
    entry k   position P-1+k, k = 1..R: log p(ids[P-1+k] | ids[:P-1+k]) = the k-th response token

(with lsl = P the first response token would be the null entry and be lost). `input_top_logprobs` is aligned
the same way. SGLang echoes ids >= vocab_size - 1 as 0; every other echoed id must equal what was sent.

Top-k (`top_logprobs_num: k`) comes as nested `input_top_logprobs` rows of `[logprob, id, text]` triples or,
with `flat_top_k` (`return_flat_raw_top_logprobs` + `_b64`; the teacher's choice), as flat arrays:
`input_top_logprobs_val_flat_b64` (float32, little-endian) and `input_top_logprobs_idx_flat_b64` (int32) hold
`shape = [rows, k]` values, row i for entry `null_prefix + i` (the null entry 0 is the prefix). Measured on
the CPU server at k = 64: 714 bytes per position against 1,948 nested, and half the time (docs/methods.md).
`logprob_start: zero` sends 0 instead (what other trainers send; entries 0..P-1 are then dropped), for
measuring the difference (`launch/bench_inference.py`).

Generation. `sampling_params` takes `temperature, top_p, top_k, max_new_tokens, stop_token_ids` and the
seed under the name `sampling_seed` (`seed` is a 400). `meta_info.output_token_logprobs` are
`log_softmax(logits / T)` after logit bias and before top-k/top-p truncation; a matched stop/EOS token is
included in `output_ids`; `finish_reason` is `{"type": "length" | "stop", ...}`.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from dnmopd.serving.errors import ResponseFormatError, describe

SCORE_SAMPLING_PARAMS = {"max_new_tokens": 0, "temperature": 0}
LOGPROB_STARTS = ("prompt", "zero")


def logprob_start_len(prompt_len: int, start: str = "prompt") -> int:
    """The `logprob_start_len` of a scoring request: P - 1 (`prompt`) or 0 (`zero`)."""
    if start not in LOGPROB_STARTS:
        raise ValueError(f"logprob_start={start!r}: use one of {LOGPROB_STARTS}")
    return prompt_len - 1 if start == "prompt" else 0


def score_body(token_ids: Sequence[int], prompt_len: int, *, top_k: int = 0, flat_top_k: bool = False,
               start: str = "prompt") -> dict[str, Any]:
    """Body of a prefill-only scoring request for one sample (its top-k as flat base64 arrays with `flat_top_k`)."""
    body: dict[str, Any] = {
        "input_ids": list(token_ids),
        "sampling_params": dict(SCORE_SAMPLING_PARAMS),
        "return_logprob": True,
        "logprob_start_len": logprob_start_len(prompt_len, start),
    }
    return _with_top_k(body, top_k, flat_top_k)


def batch_score_body(
    samples: Sequence[tuple[Sequence[int], int]], *, top_k: int | Sequence[int] = 0, flat_top_k: bool = False,
    start: str = "prompt",
) -> dict[str, Any]:
    """One request scoring several (token_ids, prompt_len) samples; the answer is a list in this order. `top_k`
    is one k for all, or one per sample."""
    body: dict[str, Any] = {
        "input_ids": [list(ids) for ids, _ in samples],
        "sampling_params": dict(SCORE_SAMPLING_PARAMS),
        "return_logprob": True,
        "logprob_start_len": [logprob_start_len(prompt_len, start) for _, prompt_len in samples],
    }
    if not isinstance(top_k, int):
        top_k = list(top_k) if len(set(top_k)) > 1 else top_k[0]
    return _with_top_k(body, top_k, flat_top_k)


def _with_top_k(body: dict[str, Any], top_k: int | list[int], flat: bool) -> dict[str, Any]:
    if top_k:
        body["top_logprobs_num"] = top_k
        if flat:
            body.update(return_flat_raw_top_logprobs=True, return_flat_raw_top_logprobs_b64=True)
    return body


def parse_score(
    item: Any, token_ids: Sequence[int], prompt_len: int, *, vocab_size: int, top_k: int = 0, start: str = "prompt"
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(logprobs [R], topk_ids [R, k] | None, topk_logprobs [R, k] | None) from one `/generate` result."""
    meta = _meta_info(item)
    first = logprob_start_len(prompt_len, start)
    count, skip = len(token_ids) - first, prompt_len - first  # entries sent back; entries before the response
    entries = meta.get("input_token_logprobs")
    if not isinstance(entries, list) or len(entries) != count:
        got = len(entries) if isinstance(entries, list) else type(entries).__name__
        raise ResponseFormatError(
            f"input_token_logprobs: expected {count} entries (logprob_start_len={first}), got {got}"
        )
    values = []
    for k, entry in enumerate(entries[skip:], start=skip):
        position = first + k
        values.append(_logprob_value(entry, f"input_token_logprobs[{k}]"))
        _check_echo(entry[1], token_ids[position], vocab_size, position)
    logprobs = torch.tensor(values, dtype=torch.float32)
    if not top_k:
        return logprobs, None, None
    if "input_top_logprobs_shape" in meta:
        topk_ids, topk_values = flat_top_rows(meta, count, skip, top_k, vocab_size)
        return logprobs, topk_ids, topk_values
    rows = meta.get("input_top_logprobs")
    if not isinstance(rows, list) or len(rows) != count:
        raise ResponseFormatError(f"input_top_logprobs: expected {count} rows")
    topk_ids, topk_values = top_rows(rows[skip:], top_k, "input_top_logprobs")
    return logprobs, topk_ids, topk_values


FLAT_DTYPES = {"float32": np.float32, "int32": np.int32}


def flat_top_rows(meta: dict[str, Any], count: int, skip: int, top_k: int,
                  vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [count - skip, k] int64, logprobs [count - skip, k] float32) of entries skip.. from the flat base64
    arrays of `count` entries (module docstring); the first `top_k` columns of each row."""
    shape, prefix = meta.get("input_top_logprobs_shape"), meta.get("input_top_logprobs_null_prefix")
    if not (isinstance(shape, list) and len(shape) == 2 and isinstance(prefix, int)
            and shape[0] + prefix == count and shape[1] >= top_k and prefix <= skip):
        raise ResponseFormatError(f"flat input top logprobs: shape {shape!r} and null_prefix {prefix!r} do not "
                                  f"cover {count} entries with {top_k} candidates from entry {skip}")
    arrays = []
    for field, dtype in (("val", "float32"), ("idx", "int32")):
        key = f"input_top_logprobs_{field}_flat_b64"
        declared = meta.get(f"{key}_dtype")
        if declared != dtype:
            raise ResponseFormatError(f"{key}_dtype is {declared!r}, expected {dtype!r}")
        try:
            raw = base64.b64decode(meta[key], validate=True)
        except (KeyError, TypeError, ValueError) as error:
            raise ResponseFormatError(f"{key}: not base64 ({error})") from None
        if len(raw) != shape[0] * shape[1] * 4:
            raise ResponseFormatError(f"{key}: {len(raw)} bytes for shape {shape}")
        array = np.frombuffer(raw, dtype=np.dtype(FLAT_DTYPES[dtype]).newbyteorder("<")).reshape(shape)
        arrays.append(array[skip - prefix:, :top_k].astype(FLAT_DTYPES[dtype]))
    values, ids = torch.from_numpy(arrays[0].copy()), torch.from_numpy(arrays[1].astype(np.int64))
    if bool(torch.isnan(values).any()):
        raise ResponseFormatError("flat input top logprobs: a value is NaN")
    if bool(((ids < 0) | (ids >= vocab_size)).any()):
        raise ResponseFormatError(f"flat input top logprobs: a token id lies outside [0, {vocab_size})")
    return ids, values


def cached_tokens(item: Any) -> tuple[int, int]:
    """(prompt_tokens, cached_tokens) of one result: how much of the input the radix cache supplied."""
    meta = item.get("meta_info") if isinstance(item, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    return int(meta.get("prompt_tokens") or 0), int(meta.get("cached_tokens") or 0)


def parse_batch(payload: Any, count: int) -> list[Any]:
    """A batch answer is a JSON list of `count` results in request order."""
    if not isinstance(payload, list) or len(payload) != count:
        raise ResponseFormatError(f"batch /generate: expected a list of {count} results, got {describe(payload)}")
    return payload


def generate_body(
    prompt_ids: Sequence[int], sampling: dict[str, Any], *, top_logprobs_num: int = 0
) -> dict[str, Any]:
    """Body of a generation request; `sampling` is already in SGLang's vocabulary (see rollout.sglang)."""
    body: dict[str, Any] = {
        "input_ids": list(prompt_ids),
        "sampling_params": {"skip_special_tokens": False, "no_stop_trim": True, **sampling},
        "return_logprob": True,
        "logprob_start_len": len(prompt_ids),
    }
    if top_logprobs_num:
        body["top_logprobs_num"] = top_logprobs_num
    return body


def parse_generation(item: Any, *, top_logprobs_num: int = 0):
    """(output_ids, output logprobs [N] float64, finish "stop"|"length", top rows | None) of one result."""
    meta = _meta_info(item)
    output_ids = item.get("output_ids")
    entries = meta.get("output_token_logprobs")
    if not isinstance(output_ids, list) or not isinstance(entries, list) or len(entries) != len(output_ids):
        raise ResponseFormatError(f"generation: output_ids and output_token_logprobs disagree: {describe(item)}")
    values = [_logprob_value(e, f"output_token_logprobs[{i}]") for i, e in enumerate(entries)]
    for i, (entry, token) in enumerate(zip(entries, output_ids, strict=True)):
        if entry[1] != token:
            raise ResponseFormatError(f"output_token_logprobs[{i}] is for id {entry[1]}, output_ids has {token}")
    finish = (meta.get("finish_reason") or {}).get("type")
    if finish not in ("stop", "length"):
        raise ResponseFormatError(f"unexpected finish_reason {meta.get('finish_reason')!r}")
    top = None
    if top_logprobs_num:
        top = top_rows(meta.get("output_top_logprobs") or [], top_logprobs_num, "output_top_logprobs")
        if top[0].shape[0] != len(output_ids):
            raise ResponseFormatError("output_top_logprobs: one row per output token expected")
    return [int(t) for t in output_ids], torch.tensor(values, dtype=torch.float64), finish, top


def top_rows(rows: list[Any], k: int, field: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of `[logprob, id, text]` triples (descending) -> (ids [N, k] int64, logprobs [N, k] float32)."""
    ids, values = [], []
    for n, row in enumerate(rows):
        if not isinstance(row, list) or len(row) < k:
            raise ResponseFormatError(f"{field}[{n}]: expected {k} candidates, got {describe(row)}")
        values.append([_logprob_value(t, f"{field}[{n}]") for t in row[:k]])
        ids.append([int(t[1]) for t in row[:k]])
    return torch.tensor(ids, dtype=torch.long).reshape(-1, k), torch.tensor(values).reshape(-1, k)


def _meta_info(item: Any) -> dict[str, Any]:
    if not isinstance(item, dict) or not isinstance(item.get("meta_info"), dict):
        raise ResponseFormatError(f"/generate result without meta_info: {describe(item)}")
    return item["meta_info"]


def _logprob_value(entry: Any, where: str) -> float:
    if not isinstance(entry, list | tuple) or len(entry) < 2:
        raise ResponseFormatError(f"{where}: expected [logprob, token_id, text], got {entry!r}")
    value = entry[0]
    if not isinstance(value, int | float) or math.isnan(value):
        raise ResponseFormatError(f"{where}: log-prob is {value!r}")
    return float(value)


def _check_echo(echoed: Any, sent: int, vocab_size: int, position: int) -> None:
    if echoed == sent or (sent >= vocab_size - 1 and echoed == 0):
        return
    raise ResponseFormatError(
        f"echoed token id {echoed!r} at position {position} differs from the id sent ({sent}): "
        "the server scored a different sequence"
    )


# ------------------------------------------------------------------------------------------------------------
# Weight updates over a process group (SGLang 0.5.23's routes; what they do is in serving.weight_group).

WEIGHT_ROUTES = {"init": "/init_weights_update_group", "destroy": "/destroy_weights_update_group",
                 "begin": "/begin_weight_update", "update": "/update_weights_from_distributed",
                 "end": "/end_weight_update", "pause": "/pause_generation", "continue": "/continue_generation",
                 "version": "/update_weight_version"}
SESSION_ALREADY_OPEN = "a weight-update session is already open"
"""The message of a `/begin_weight_update` refused because an earlier (failed) update never ended its session."""


def init_group_body(host: str, port: int, rank_offset: int, world_size: int, group_name: str,
                    backend: str) -> dict[str, Any]:
    """Join the custom group whose rank 0 (the sender, the rendezvous store's host) listens on host:port; the
    server's tensor-parallel ranks take ranks `rank_offset` .. `rank_offset + tp - 1`."""
    return {"master_address": host, "master_port": port, "rank_offset": rank_offset, "world_size": world_size,
            "group_name": group_name, "backend": backend}


def dtype_name(dtype: torch.dtype) -> str:
    """A torch dtype as the update routes name it (`torch.bfloat16` -> `bfloat16`)."""
    return str(dtype).removeprefix("torch.")


def update_body(tensors: Sequence[tuple[str, torch.Tensor]], group_name: str, *, flattened: bool,
                version: str | None) -> dict[str, Any]:
    """Receive `tensors` (their names, dtypes, shapes) from the group's rank 0: one broadcast per tensor, or
    one of their bytes concatenated (`flattened`). The last call of an update sets its `version` and flushes
    the radix cache (the earlier ones do not: generation is paused in between)."""
    body: dict[str, Any] = {
        "names": [name for name, _ in tensors],
        "dtypes": [dtype_name(t.dtype) for _, t in tensors],
        "shapes": [list(t.shape) for _, t in tensors],
        "group_name": group_name,
        "flush_cache": version is not None,
    }
    if flattened:
        body["load_format"] = "flattened_bucket"
    if version is not None:
        body["weight_version"] = version
    return body


def server_parallelism(info: Any) -> tuple[int, int]:
    """(tp_size, dp_size) from a `/get_server_info` answer."""
    sizes = tuple(info.get(key) if isinstance(info, dict) else None for key in ("tp_size", "dp_size"))
    if not all(isinstance(size, int) and size >= 1 for size in sizes):
        raise ResponseFormatError(f"/get_server_info without integer tp_size and dp_size: {describe(info)}")
    return sizes


def check_success(answer: Any, route: str) -> None:
    """A weight route's answer is `{"success": true, ...}`; anything else is a format error."""
    if not isinstance(answer, dict) or answer.get("success") is not True:
        raise ResponseFormatError(f"{route} answered {describe(answer)}")
