"""The flat base64 top-k of SGLang 0.5.23 (`return_flat_raw_top_logprobs` + `_b64`), against exchanges recorded from
a real server (tests/fixtures/wire/sglang/sglang_33..35, one server run): the bodies we send are the recorded
requests, the flat answer parses to the nested answer of the same request, per-item k works in a batch, and
damaged flat fields are refused."""

import base64
import copy

import pytest
import torch
from wire_fixtures import load_exchange

from dnmopd.serving import sglang_api
from dnmopd.serving.errors import ResponseFormatError

SEQ = [370, 28, 345, 340, 289, 264, 289, 33, 360, 28, 362, 16, 223, 274, 277, 291, 264, 300]
OTHER = [5, 900, 31, 77, 402, 16, 223, 700, 12]
FLAT, NESTED, BATCH = ("sglang/sglang_33_score_top_logprobs3_flat_b64",
                       "sglang/sglang_34_score_top_logprobs3_nested_same_model",
                       "sglang/sglang_35_batch_score_flat_b64_mixed_k")


def parse(item, ids=SEQ, prompt_len=10, top_k=3):
    return sglang_api.parse_score(item, ids, prompt_len, vocab_size=1024, top_k=top_k)


def test_flat_top_k_equals_the_nested_answer_of_the_same_request():
    flat, nested = load_exchange(FLAT), load_exchange(NESTED)
    assert sglang_api.score_body(SEQ, 10, top_k=3, flat_top_k=True) == flat["request"]
    assert sglang_api.score_body(SEQ, 10, top_k=3) == nested["request"]
    assert "input_top_logprobs" not in flat["response"]["meta_info"]
    logprobs, ids, values = parse(flat["response"])
    want_logprobs, want_ids, want_values = parse(nested["response"])
    assert ids.shape == (8, 3) and ids.dtype == torch.long and values.dtype == torch.float32
    assert torch.equal(ids, want_ids) and torch.equal(logprobs, want_logprobs)
    torch.testing.assert_close(values, want_values, atol=1e-6, rtol=0)  # float32 arrays vs JSON float64


def test_a_batch_with_one_k_per_sample():
    batch = load_exchange(BATCH)
    body = sglang_api.batch_score_body([(SEQ, 10), (OTHER, 5)], top_k=[3, 5], flat_top_k=True)
    assert body == batch["request"]
    first, second = sglang_api.parse_batch(batch["response"], 2)
    _, ids, values = parse(first)
    _, nested_ids, nested_values = parse(load_exchange(NESTED)["response"])
    assert torch.equal(ids, nested_ids)
    torch.testing.assert_close(values, nested_values, atol=1e-6, rtol=0)
    logprobs, ids, values = parse(second, OTHER, 5, top_k=5)
    assert ids.shape == values.shape == (4, 5) and logprobs.shape == (4,)
    assert bool((values[:, 1:] <= values[:, :-1]).all()) and bool((ids.sort(1).values.diff(1) > 0).all())
    # one k for all samples is sent as one number
    assert sglang_api.batch_score_body([(SEQ, 10), (OTHER, 5)], top_k=[3, 3])["top_logprobs_num"] == 3


def damaged(edit):
    item = copy.deepcopy(load_exchange(FLAT)["response"])
    edit(item["meta_info"])
    return item


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(input_top_logprobs_shape=[7, 3]), "do not cover 9 entries"),
    (lambda m: m.update(input_top_logprobs_null_prefix=None), "do not cover"),
    (lambda m: m.update(input_top_logprobs_shape=[8, 2]), "with 3 candidates"),
    (lambda m: m.update(input_top_logprobs_val_flat_b64="not base64!"), "not base64"),
    (lambda m: m.update(input_top_logprobs_val_flat_b64=m["input_top_logprobs_val_flat_b64"][:-8]), "bytes for shape"),
    (lambda m: m.update(input_top_logprobs_idx_flat_b64_dtype="int64"), "expected 'int32'"),
    (lambda m: m.update(input_top_logprobs_idx_flat_b64=base64.b64encode(
        (torch.full((24,), 1024, dtype=torch.int32)).numpy().tobytes()).decode()), "outside \\[0, 1024\\)"),
    (lambda m: m.update(input_top_logprobs_val_flat_b64=base64.b64encode(
        (torch.full((24,), float("nan"))).numpy().tobytes()).decode()), "NaN"),
])
def test_damaged_flat_fields_are_refused(edit, message):
    with pytest.raises(ResponseFormatError, match=message):
        parse(damaged(edit))
