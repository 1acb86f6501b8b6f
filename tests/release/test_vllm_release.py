"""The trainer's own releases served by a real vLLM CPU server agree with transformers.

A short trainer run exports each release (`release_runs`); vLLM serves it as a user would (Qwen3 in float32;
Qwen3.5 in bfloat16, the only dtype of vLLM's CPU Gated DeltaNet kernel). Compared with transformers in float32
(float64 log-softmax): the prompt log-probs of chat prompts rendered by the trainer's own tokenizer, greedy
continuations, and the chat endpoint's rendering of the shipped chat template.

Tolerances (measured, see docs/benchmarks.md): in float32 vLLM's prompt log-probs are within 1e-4 of
transformers' and every greedy token is the float32 argmax. In bfloat16 the log-probs must be as close to
float32 as transformers' own bfloat16 forward is (at most twice its spread, measured in the same run), and every
greedy token must be within that tolerance of the float32 argmax (bf16 rounding can swap near-ties).
"""

from __future__ import annotations

import json
import urllib.request

import pytest
import torch
from vllm_env import vllm_server

from dnmopd.data.chat import PromptTokenizer, row_messages
from dnmopd.data.sample_data import sample_file

pytestmark = pytest.mark.slow  # a trainer run, then a vLLM server start (~1-2 min each on 2 cores)

FP32_TOLERANCE = 1e-4
NEW_TOKENS = 16
MAX_MODEL_LEN = 1024


def sample_messages(count: int = 4) -> list[list[dict]]:
    """The first `count` prompts of the sample data of each domain."""
    rows = [json.loads(line) for line in sample_file("student/train_3domain.jsonl").read_text().splitlines()]
    picked = {}
    for row in rows:
        picked.setdefault(row["metadata"]["domain"], []).append(row)
    return [row_messages(row) for rows in picked.values() for row in rows[: count // 3 + 1]][:count]


def post(server, path: str, body: dict) -> dict:
    request = urllib.request.Request(server.spec.url + path, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as answer:
        return json.load(answer)


def reference_logprobs(model, ids: list[int]) -> torch.Tensor:
    """[len(ids), vocab] float64 log-softmax of the next-token logits after each prefix."""
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), dim=-1)


def served_prompt_logprobs(server, ids: list[int]) -> torch.Tensor:
    answer = post(server, "/v1/completions", {"model": server.spec.model_path, "prompt": ids, "max_tokens": 1,
                                              "temperature": 0, "prompt_logprobs": 0})
    entries = answer["choices"][0]["prompt_logprobs"][1:]
    return torch.tensor([entry[str(token)]["logprob"] for entry, token in zip(entries, ids[1:], strict=True)],
                        dtype=torch.float64)


def served_greedy(server, ids: list[int]) -> list[int]:
    answer = post(server, "/v1/completions", {"model": server.spec.model_path, "prompt": ids, "temperature": 0,
                                              "max_tokens": NEW_TOKENS, "ignore_eos": True, "return_token_ids": True})
    return answer["choices"][0]["token_ids"]


def token_logprobs(logprobs: torch.Tensor, ids: list[int]) -> torch.Tensor:
    return logprobs[:-1].gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1)


@pytest.fixture(scope="module", params=[("qwen3", "float32"), ("qwen3_5", "bfloat16")], ids=["qwen3", "qwen3_5"])
def served(request, trainer_run, tmp_path_factory):
    arch, dtype = request.param
    release = trainer_run(arch) / "release"
    with vllm_server(release, tmp_path_factory.mktemp(f"vllm-{arch}"), dtype=dtype, max_model_len=MAX_MODEL_LEN,
                     name=arch) as server:
        yield release, server, dtype


def test_release_serves_as_transformers_computes(served):
    from transformers import AutoModelForCausalLM

    release, server, dtype = served
    tokenizer = PromptTokenizer.from_pretrained(release)
    reference = AutoModelForCausalLM.from_pretrained(release, dtype=torch.float32).eval()
    prompts = [tokenizer.encode(messages) for messages in sample_messages()]
    assert all(len(ids) + NEW_TOKENS < MAX_MODEL_LEN for ids in prompts)
    served_errors, hf_bf16_errors = [], []
    lowered = AutoModelForCausalLM.from_pretrained(release, dtype=torch.bfloat16).eval() if dtype != "float32" else None
    for ids in prompts:
        want = token_logprobs(reference_logprobs(reference, ids), ids)
        served_errors.append((served_prompt_logprobs(server, ids) - want).abs())
        if lowered is not None:
            hf_bf16_errors.append((token_logprobs(reference_logprobs(lowered, ids), ids) - want).abs())
    served_errors = torch.cat(served_errors)
    print(f"{release.parent.name} {dtype}: |vLLM - transformers fp32| prompt log-prob max {served_errors.max():.2e}, "
          f"mean {served_errors.mean():.2e} over {len(served_errors)} tokens")
    if lowered is None:
        tolerance = FP32_TOLERANCE
    else:
        hf_bf16_errors = torch.cat(hf_bf16_errors)
        print(f"{release.parent.name}: |transformers bf16 - fp32| max {hf_bf16_errors.max():.2e}, "
              f"mean {hf_bf16_errors.mean():.2e}")
        tolerance = 2 * hf_bf16_errors.max().item()
        assert served_errors.mean() <= 2 * hf_bf16_errors.mean()
    assert served_errors.max().item() <= tolerance

    exact = 0
    for ids in prompts:  # teacher-forced along vLLM's continuation: each token must be transformers' greedy choice
        continuation = served_greedy(server, ids)
        assert len(continuation) == NEW_TOKENS
        steps = reference_logprobs(reference, ids + continuation)[len(ids) - 1 : -1]
        gaps = steps.max(dim=1).values - steps.gather(1, torch.tensor(continuation)[:, None]).squeeze(1)
        assert gaps.max().item() <= tolerance, (continuation, gaps)
        exact += bool((gaps == 0).all())
    print(f"{release.parent.name} {dtype}: greedy continuations identical to transformers fp32 on {exact} of "
          f"{len(prompts)} prompts")
    if lowered is None:
        assert exact == len(prompts)


def test_chat_endpoint_renders_the_trainers_prompts(served):
    release, server, _ = served
    tokenizer = PromptTokenizer.from_pretrained(release)
    for messages in sample_messages(2):
        answer = post(server, "/v1/chat/completions", {
            "model": server.spec.model_path, "messages": messages, "max_tokens": 4, "temperature": 0,
            "return_token_ids": True, "chat_template_kwargs": {"enable_thinking": False}})
        assert answer["prompt_token_ids"] == tokenizer.encode(messages)
        assert len(answer["choices"][0]["token_ids"]) >= 1
