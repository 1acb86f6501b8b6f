"""Integration with a real SGLang server (SGLang 0.5.23 on the CPU, its own environment made by `make sglang-env`).

One server on 127.0.0.1 serves the tiny tied Qwen3 in fp32. Everything is checked against Hugging Face
transformers in fp32: teacher scores (one sample per POST and batched, top-k), rollout log-probs of the
sampled distribution and finish reasons, weight updates verified by the probe, the weight version of
every answer, identity after an update, and an over-long sample that only costs itself.
"""


import asyncio

import pytest
import torch
from sglang_servers import CONTEXT_LENGTH
from tiny_checkpoints import perturbed_state

from dnmopd.rollout.base import RolloutRequest, SamplingParams, WeightProbe
from dnmopd.rollout.inprocess import eos_token_ids
from dnmopd.rollout.sampling import sampling_logprobs
from dnmopd.rollout.sglang import SGLangRollout
from dnmopd.serving.errors import RequestRejected
from dnmopd.serving.pool import ReplicaPool
from dnmopd.teachers.base import ScoreRequest
from dnmopd.teachers.inprocess import InProcessTeacher
from dnmopd.teachers.sglang import SGLangTeacher

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # the server takes about a minute to start on 2 cores

PROMPTS = [[370, 28, 345, 340, 289, 264, 289, 33, 360, 28], [5, 6], [100, 200, 300, 400, 500, 600, 700]]


def pool(server, **overrides):
    return ReplicaPool.Config(urls=[server.url], **{"request_timeout_s": 120, "max_attempts": 2, **overrides})


def teacher(server, model_dir, **overrides):
    return SGLangTeacher.Config(name="math", model_path=str(model_dir), pool=pool(server), **overrides).build()


def rollout_engine(server, model_dir):
    return SGLangRollout.Config(model_path=str(model_dir), pool=pool(server),
                                update_dir=str(model_dir.parent / "sglang-updates")).build()


def random_requests(shapes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [ScoreRequest(torch.randint(3, 1024, (n,), generator=generator).tolist(), p) for n, p in shapes]


def hf_scores(model_dir, requests, model=None):
    config = InProcessTeacher.Config(name="ref", model_path=str(model_dir), top_k=3)
    scorer = InProcessTeacher(config, model=model) if model is not None else config.build()
    return scorer.score_batch(requests)


def test_teacher_scores_match_transformers_one_per_post_and_batched(tiny_sglang, tiny_model_dir):
    requests = random_requests([(18, 10), (40, 5), (7, 1), (64, 60)])
    reference = hf_scores(tiny_model_dir, requests)
    for batch_request_size in (1, 3):
        served_teacher = teacher(tiny_sglang, tiny_model_dir, top_k=3, batch_request_size=batch_request_size)
        served_teacher.check()
        for got, want in zip(served_teacher.score_batch(requests), reference, strict=True):
            torch.testing.assert_close(got.logprobs, want.logprobs, atol=2e-5, rtol=0)
            torch.testing.assert_close(got.topk_logprobs, want.topk_logprobs, atol=2e-5, rtol=0)
            assert torch.equal(got.topk_ids, want.topk_ids)
        assert served_teacher.pool.counters["failed_attempts"] == 0


@pytest.mark.parametrize("params", [
    SamplingParams(max_new_tokens=12),
    SamplingParams(temperature=0.7, top_k=20, max_new_tokens=12),
    SamplingParams(temperature=1.3, max_new_tokens=12),
    SamplingParams(temperature=0, max_new_tokens=8),
], ids=["t1", "t0.7-k20", "t1.3", "greedy"])
def test_rollouts_report_the_sampled_distribution(tiny_sglang, tiny_model_dir, tiny_hf_model, params):
    engine = rollout_engine(tiny_sglang, tiny_model_dir)
    rollouts = engine.generate_batch([RolloutRequest(p, i) for i, p in enumerate(PROMPTS)], params)
    for rollout in rollouts:
        ids = rollout.prompt_ids + rollout.response_ids
        with torch.no_grad():
            logits = tiny_hf_model(torch.tensor([ids])).logits[0, len(rollout.prompt_ids) - 1 : -1]
        expected = sampling_logprobs(logits, params).gather(1, torch.tensor(rollout.response_ids)[:, None])
        torch.testing.assert_close(rollout.logprobs, expected.squeeze(1), atol=2e-5, rtol=0)
        if rollout.finish_reason == "length":
            assert len(rollout.response_ids) == params.max_new_tokens
        else:  # a sampled EOS ends it early, and is kept
            assert rollout.finish_reason == "stop" and rollout.response_ids[-1] in eos_token_ids(tiny_hf_model)
            assert len(rollout.response_ids) <= params.max_new_tokens


def test_finish_reasons_stop_ids_length_and_one_token(tiny_sglang, tiny_model_dir, tiny_hf_model):
    engine = rollout_engine(tiny_sglang, tiny_model_dir)
    request = RolloutRequest(PROMPTS[2], 0)
    greedy = engine.generate_batch([request], SamplingParams(temperature=0, max_new_tokens=6))[0]
    with torch.no_grad():  # the greedy continuation of transformers, token by token
        ids = list(PROMPTS[2])
        for _ in range(6):
            ids.append(int(tiny_hf_model(torch.tensor([ids])).logits[0, -1].argmax()))
    assert greedy.response_ids == ids[len(PROMPTS[2]):] and greedy.finish_reason == "length"
    stop_id = greedy.response_ids[2]
    first_stop = greedy.response_ids.index(stop_id)
    stopped = engine.generate_batch([request], SamplingParams(temperature=0, max_new_tokens=6,
                                                              stop_token_ids=(stop_id,)))[0]
    assert stopped.finish_reason == "stop" and stopped.response_ids == greedy.response_ids[: first_stop + 1]
    torch.testing.assert_close(stopped.logprobs, greedy.logprobs[: first_stop + 1])
    one = engine.generate_batch([request], SamplingParams(max_new_tokens=1))[0]
    assert len(one.response_ids) == 1 and len(one.logprobs) == 1 and one.finish_reason in ("length", "stop")


def test_weight_update_is_probed_versioned_and_keeps_the_identity(tiny_sglang, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    engine = rollout_engine(tiny_sglang, tiny_model_dir)
    engine.check()
    probe_request = ScoreRequest(tuple(PROMPTS[0] + [362, 16, 223, 274, 277, 291]), 10)
    state = perturbed_state(tiny_model_dir, seed=1)  # the embedding (= tied head) changes too
    updated = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    updated.load_state_dict(state, strict=False)
    expected = hf_scores(tiny_model_dir, [probe_request], updated)[0].logprobs
    try:
        engine.update_weights(state.items(), WeightProbe(probe_request.token_ids, 10, expected, tolerance=1e-4))
        assert engine.weight_version == 1
        engine.check()  # identity: the server now serves our update folder, at our version
        requests = random_requests([(30, 12), (20, 3)], seed=3)
        served = teacher(tiny_sglang, engine.served_folder, batch_request_size=2).score_batch(requests)
        for got, want in zip(served, hf_scores(tiny_model_dir, requests, updated), strict=True):
            torch.testing.assert_close(got.logprobs, want.logprobs, atol=2e-5, rtol=0)
        rollout = engine.generate_batch([RolloutRequest(PROMPTS[0], 0)], SamplingParams(max_new_tokens=4))[0]
        assert len(rollout.response_ids) == 4  # answered at weight version step-1, or generate would have failed
        assert engine.pool.counters["repairs"] == 0
    finally:  # back to the original weights for the other tests of this module
        original = hf_scores(tiny_model_dir, [probe_request])[0].logprobs
        engine.update_weights_from_disk(tiny_model_dir, WeightProbe(probe_request.token_ids, 10, original, 1e-4))


def test_an_over_long_sample_costs_only_itself(tiny_sglang, tiny_model_dir):
    requests = random_requests([(18, 10), (CONTEXT_LENGTH + 20, 10), (40, 5), (7, 1)], seed=5)
    reference = hf_scores(tiny_model_dir, [requests[i] for i in (0, 2, 3)])
    served_teacher = teacher(tiny_sglang, tiny_model_dir, batch_request_size=4)

    async def score_many():
        try:
            return await served_teacher.score_many(requests)
        finally:
            await served_teacher.aclose()

    results = asyncio.run(score_many())  # per-sample outcomes: scores, or the error that ended the sample
    assert [isinstance(r, Exception) for r in results] == [False, True, False, False]
    assert "longer than the model's context length" in str(results[1])
    assert served_teacher.pool.counters["isolated_chunks"] == 1  # one POST of 4, then 4 POSTs of 1
    for result, want in zip([results[i] for i in (0, 2, 3)], reference, strict=True):
        torch.testing.assert_close(result.logprobs, want.logprobs, atol=2e-5, rtol=0)
    with pytest.raises(RequestRejected, match="context length"):  # the blocking call names the failure
        teacher(tiny_sglang, tiny_model_dir, batch_request_size=4).score_batch(requests)
