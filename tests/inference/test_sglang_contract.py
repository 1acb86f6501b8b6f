"""SGLang wire contract, checked on exchanges recorded from a real SGLang 0.5.23 server.

Request bodies must be byte-for-byte what the server was sent; parsed scores must equal the HF fp32
reference of the same model (independent of SGLang) at the response positions.
"""

import pytest
import torch
from wire_fixtures import load_exchange

from dnmopd.serving import sglang_api
from dnmopd.serving.errors import ResponseFormatError
from dnmopd.serving.token_ids import InvalidTokenIds, validate_token_ids

REF = load_exchange("hf_reference_logprobs")
SEQ, PROMPT_LEN = REF["seq"], len(REF["prompt"])
HF_A = torch.tensor(REF["tiny-qwen3"]["token_logprobs"][1:], dtype=torch.float64)  # position i >= 1
HF_B = torch.tensor(REF["tiny-qwen3-b"]["token_logprobs"][1:], dtype=torch.float64)


def hf_slice(reference, start, end):
    """HF log-probs of absolute positions [start, end)."""
    return reference[start - 1 : end - 1]


def test_score_body_is_the_recorded_prefill_request_with_lsl_prompt_len_minus_1():
    exchange = load_exchange("sglang/sglang_02_score_lsl_promptlen_minus1")
    assert sglang_api.score_body(SEQ, PROMPT_LEN) == exchange["request"]
    assert exchange["request"]["logprob_start_len"] == PROMPT_LEN - 1


def test_parse_drops_the_null_entry_and_returns_the_response_tokens():
    exchange = load_exchange("sglang/sglang_02_score_lsl_promptlen_minus1")
    entries = exchange["response"]["meta_info"]["input_token_logprobs"]
    assert entries[0][0] is None and len(entries) == len(SEQ) - PROMPT_LEN + 1
    logprobs, _, _ = sglang_api.parse_score(exchange["response"], SEQ, PROMPT_LEN, vocab_size=1024)
    assert logprobs.shape == (len(SEQ) - PROMPT_LEN,)
    torch.testing.assert_close(logprobs.double(), hf_slice(HF_A, PROMPT_LEN, len(SEQ)), atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", ["sglang_01_score_lsl0", "sglang_03_score_lsl_promptlen"])
def test_entry_zero_is_null_for_any_start_so_lsl_prompt_len_would_lose_a_token(name):
    exchange = load_exchange(f"sglang/{name}")
    entries = exchange["response"]["meta_info"]["input_token_logprobs"]
    lsl = exchange["request"]["logprob_start_len"]
    assert entries[0][0] is None and entries[0][1] == SEQ[lsl]
    assert all(e[0] is not None for e in entries[1:])
    if lsl == PROMPT_LEN:  # the first response token's log-prob is the null entry: unusable for scoring
        with pytest.raises(ResponseFormatError, match="expected 9 entries"):
            sglang_api.parse_score(exchange["response"], SEQ, PROMPT_LEN, vocab_size=1024)


@pytest.mark.parametrize("name", ["sglang_04_score_lsl_omitted", "sglang_81_lsl_equal_len"])
def test_empty_input_logprobs_are_a_format_error(name):
    exchange = load_exchange(f"sglang/{name}")
    assert exchange["response"]["meta_info"]["input_token_logprobs"] == []
    with pytest.raises(ResponseFormatError):
        sglang_api.parse_score(exchange["response"], SEQ, PROMPT_LEN, vocab_size=1024)


def test_batch_body_and_list_answer():
    exchange = load_exchange("sglang/sglang_10_batch_score_lsl_list")
    samples = [(SEQ, PROMPT_LEN), (SEQ[:12], 4), (SEQ[:5], 1)]
    assert sglang_api.batch_score_body(samples) == exchange["request"]
    items = sglang_api.parse_batch(exchange["response"], 3)
    for item, (ids, prompt_len) in zip(items, samples, strict=True):
        logprobs, _, _ = sglang_api.parse_score(item, ids, prompt_len, vocab_size=1024)
        torch.testing.assert_close(logprobs.double(), hf_slice(HF_A, prompt_len, len(ids)), atol=1e-6, rtol=0)
    with pytest.raises(ResponseFormatError, match="expected a list of 2"):
        sglang_api.parse_batch(exchange["response"], 2)


def test_mismatched_lsl_list_is_a_recorded_500_plain_text():
    exchange = load_exchange("sglang/sglang_12_batch_score_lsl_wrong_length")
    assert exchange["status"] == 500 and exchange["response"] == "Internal Server Error"


def test_top_k_rows_align_with_the_scores():
    exchange = load_exchange("sglang/sglang_31_score_top_logprobs3")
    assert sglang_api.score_body(SEQ, PROMPT_LEN, top_k=3) == exchange["request"]
    logprobs, ids, values = sglang_api.parse_score(exchange["response"], SEQ, PROMPT_LEN, vocab_size=1024, top_k=3)
    expected_top = REF["tiny-qwen3"]["top3_at_pos9_pred_pos10"]
    assert ids[0].tolist() == [t for t, _ in expected_top]
    torch.testing.assert_close(values[0].double(), torch.tensor([v for _, v in expected_top]).double(),
                               atol=1e-6, rtol=0)
    assert bool((values[:, 0] >= logprobs - 1e-6).all())  # the top-1 bounds the chosen token


def test_echoed_ids_are_checked_except_sglangs_last_id_clipping():
    exchange = load_exchange("sglang/sglang_73_last_vocab_id_1023")
    ids = exchange["request"]["input_ids"]  # contains 1023, echoed as 0 by SGLang
    lsl = 9  # re-read the recorded lsl-0 answer as if it were a P-1 answer for prompt_len 10
    item = {"meta_info": {"input_token_logprobs": exchange["response"]["meta_info"]["input_token_logprobs"][lsl:]}}
    logprobs, _, _ = sglang_api.parse_score(item, ids, 10, vocab_size=1024)
    assert logprobs.shape == (2,)
    item["meta_info"]["input_token_logprobs"][2] = [-6.88, 6, None]  # echo of a different id
    with pytest.raises(ResponseFormatError, match="echoed token id 6 at position 11"):
        sglang_api.parse_score(item, ids, 10, vocab_size=1024)


def test_scores_after_a_weight_update_follow_the_new_weights():
    update = load_exchange("sglang/sglang_50_update_weights_from_disk")
    assert update["response"]["success"] is True
    after = load_exchange("sglang/sglang_51_score_after_update")
    lsl = after["request"]["logprob_start_len"]
    ids = after["request"]["input_ids"]
    item = {"meta_info": {"input_token_logprobs": after["response"]["meta_info"]["input_token_logprobs"]}}
    logprobs, _, _ = sglang_api.parse_score(item, ids, lsl + 1, vocab_size=1024)
    torch.testing.assert_close(logprobs.double(), hf_slice(HF_B, lsl + 1, len(ids)), atol=1e-6, rtol=0)


@pytest.mark.parametrize("name,bad", [("sglang_70_err_oov_id_1024", 1024), ("sglang_72_err_negative_id", -1)])
def test_ids_that_crash_sglang_are_refused_before_sending(name, bad):
    exchange = load_exchange(f"sglang/{name}")
    assert exchange["status"] is None  # the recorded server died without answering
    with pytest.raises(InvalidTokenIds, match=f"token id {bad} at position 10"):
        validate_token_ids(exchange["request"]["input_ids"], 1024, what="math sample 0")


def test_generation_results_parse_with_finish_reasons():
    length = load_exchange("sglang/sglang_20_generate_seed")["response"]
    ids, logprobs, finish, _ = sglang_api.parse_generation(length)
    assert (len(ids), finish) == (16, "length") and logprobs.dtype == torch.float64
    stop = load_exchange("sglang/sglang_24_generate_stop_token_ids")
    ids, _, finish, _ = sglang_api.parse_generation(stop["response"])
    assert finish == "stop" and ids[-1] in stop["request"]["sampling_params"]["stop_token_ids"]
    eos = load_exchange("sglang/sglang_29_generate_eos_forced")["response"]
    ids, logprobs, finish, _ = sglang_api.parse_generation(eos)
    assert (ids, logprobs.tolist(), finish) == ([2], [0.0], "stop")  # EOS is included in the response
    top = load_exchange("sglang/sglang_23_generate_top_logprobs3")["response"]
    ids, logprobs, _, (top_ids, top_values) = sglang_api.parse_generation(top, top_logprobs_num=3)
    assert top_ids.shape == (len(ids), 3) and bool((top_values[:, 0] >= logprobs.float() - 1e-6).all())


def test_batch_generation_answers_in_request_order():
    exchange = load_exchange("sglang/sglang_26_generate_batch2")
    items = sglang_api.parse_batch(exchange["response"], 2)
    assert [item["meta_info"]["prompt_tokens"] for item in items] == [len(p) for p in exchange["request"]["input_ids"]]
