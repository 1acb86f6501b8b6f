"""SGLang / vLLM rollout engines on recorded exchanges over sockets, log-prob conversion, refusals, backend
selection, and scoring that starts as soon as each rollout finishes."""

import asyncio

import pytest
import torch
from wire_fixtures import load_exchange

from dnmopd.rollout import rollout_class
from dnmopd.rollout.base import RolloutError, RolloutRequest, SamplingParams
from dnmopd.rollout.inprocess import InProcessRollout
from dnmopd.rollout.sampling import sampling_logprobs
from dnmopd.rollout.sglang import SGLangRollout, sampled_logprobs
from dnmopd.rollout.vllm import VLLMRollout
from dnmopd.serving.pool import ReplicaPool
from dnmopd.teachers import teacher_class
from dnmopd.teachers.fleet import TeacherFleet
from dnmopd.teachers.inprocess import InProcessTeacher

PROMPT = load_exchange("hf_reference_logprobs")["prompt"]


def sglang_engine(server, tmp_path, **overrides):
    return SGLangRollout.Config(model_path="<tiny-qwen3>", vocab_size=1024, update_dir=str(tmp_path),
                                pool=ReplicaPool.Config(urls=[server.url], max_attempts=1), **overrides).build()


def test_sglang_generation_over_sockets_matches_the_recording(replay, tmp_path):
    recorded = load_exchange("sglang/sglang_22_generate_lsl_promptlen")
    engine = sglang_engine(replay(), tmp_path, deterministic_server=True)
    params = SamplingParams(max_new_tokens=16, seed=1234)
    rollout = engine.generate_batch([RolloutRequest(PROMPT, 0)], params)[0]
    meta = recorded["response"]["meta_info"]
    assert rollout.response_ids == recorded["response"]["output_ids"] and rollout.finish_reason == "length"
    torch.testing.assert_close(rollout.logprobs, torch.tensor([e[0] for e in meta["output_token_logprobs"]]))


def test_sglang_refuses_seeds_it_would_ignore_and_top_p_it_cannot_report(replay, tmp_path):
    engine = sglang_engine(replay(), tmp_path)
    with pytest.raises(RolloutError, match="ignores sampling_seed unless"):
        engine.generate_batch([RolloutRequest(PROMPT, 0)], SamplingParams(seed=1))
    with pytest.raises(RolloutError, match="top_p=0.9: SGLang reports log-probs before top-p"):
        engine.generate_batch([RolloutRequest(PROMPT, 0)], SamplingParams(top_p=0.9))


@pytest.mark.parametrize("temperature,top_k", [(0.7, 5), (1.5, 40), (1.0, 1)])
def test_sglang_top_k_conversion_gives_the_sampled_distribution(temperature, top_k):
    logits = torch.randn(6, 1024, generator=torch.Generator().manual_seed(0)) * 3
    tokens = logits.topk(top_k, dim=-1).indices[:, -1]  # some token inside the kept set
    tempered = torch.log_softmax(logits.double() / temperature, -1)  # what SGLang reports
    reported = tempered.gather(1, tokens[:, None]).squeeze(1)
    top_values = tempered.topk(top_k, dim=-1).values.float()  # what top_logprobs_num=top_k returns
    expected = sampling_logprobs(logits, SamplingParams(temperature=temperature, top_k=top_k))
    torch.testing.assert_close(sampled_logprobs(reported, top_values).float(),
                               expected.gather(1, tokens[:, None]).squeeze(1), atol=1e-5, rtol=0)


def vllm_engine(server, tmp_path, **overrides):
    settings = dict(model_path="<tiny-qwen3>", vocab_size=1024, update_dir=str(tmp_path), max_model_len=512,
                    pool=ReplicaPool.Config(urls=[server.url], max_attempts=1))
    return VLLMRollout.Config(**{**settings, **overrides}).build()


def test_vllm_generation_over_sockets_matches_the_recording(replay, tmp_path):
    recorded = load_exchange("vllm/vllm_12_generate_return_token_ids")
    engine = vllm_engine(replay(), tmp_path, server_logprobs_mode="raw_logprobs")
    rollout = engine.generate_batch([RolloutRequest(PROMPT, 0)], SamplingParams(max_new_tokens=16, seed=1))[0]
    choice = recorded["response"]["choices"][0]
    assert rollout.response_ids == choice["token_ids"] and rollout.finish_reason == "length"
    torch.testing.assert_close(rollout.logprobs, torch.tensor(choice["logprobs"]["token_logprobs"]))


def test_vllm_refusals(replay, tmp_path):
    server = replay()
    raw = vllm_engine(server, tmp_path, server_logprobs_mode="raw_logprobs")
    with pytest.raises(RolloutError, match="reports raw log-probs, but temperature=2.0"):
        raw.generate_batch([RolloutRequest(PROMPT, 0)], SamplingParams(temperature=2.0, max_new_tokens=8))
    short = vllm_engine(server, tmp_path, max_model_len=20)
    with pytest.raises(RolloutError, match="exceed max_model_len 20"):
        short.generate_batch([RolloutRequest(PROMPT, 0)], SamplingParams(max_new_tokens=16))
    with pytest.raises(FileNotFoundError, match="not a model folder"):
        short.update_weights_from_disk(tmp_path / "missing", probe=None)


def test_backends_are_selected_by_name():
    assert rollout_class("vllm") is VLLMRollout and teacher_class("inprocess") is InProcessTeacher
    with pytest.raises(ValueError, match="teacher backend 'trt'"):
        teacher_class("trt")


def test_each_sample_is_scored_as_soon_as_its_rollout_finishes(tiny_model_dir):
    engine = InProcessRollout.Config(model_path=str(tiny_model_dir), max_batch_size=1).build()
    teacher = InProcessTeacher.Config(name="math", model_path=str(tiny_model_dir)).build()
    finished, seen_at_scoring = [], []
    original_score = teacher.score

    async def recording_score(request):
        seen_at_scoring.append(len(finished))
        return await original_score(request)

    teacher.score = recording_score
    fleet = TeacherFleet.Config().build({"math": teacher})
    requests = [RolloutRequest(PROMPT[: 3 + i], i) for i in range(4)]

    async def run():
        async def rollouts():
            async for rollout in engine.stream(requests, SamplingParams(max_new_tokens=6, seed=0)):
                finished.append(rollout.sample_id)
                yield rollout

        return await fleet.score_rollouts(rollouts(), route=lambda sample_id: "math")

    results = asyncio.run(run())
    assert [r.index for r in results] == [0, 1, 2, 3] and all(r.ok for r in results)
    assert seen_at_scoring[0] == 1  # the first sample was sent while the other three were still generating
