"""SGLang / vLLM rollout engines on recorded exchanges over sockets, log-prob conversion, refusals, start-up
checks, and scoring that starts as soon as each rollout finishes."""

from types import SimpleNamespace

import pytest
import torch
from wire_fixtures import load_exchange

from dnmopd.data.prompts import Prompt
from dnmopd.rollout.base import RolloutError, RolloutRequest, SamplingParams
from dnmopd.rollout.inprocess import InProcessRollout
from dnmopd.rollout.sampling import sampling_logprobs
from dnmopd.rollout.sglang import SGLangRollout, sampled_logprobs
from dnmopd.rollout.vllm import VLLMRollout
from dnmopd.serving.pool import ReplicaPool
from dnmopd.serving.servers import HEALTH_PATHS
from dnmopd.teachers.base import ScoreRequest
from dnmopd.teachers.fleet import TeacherFleet
from dnmopd.teachers.inprocess import InProcessTeacher
from dnmopd.trainer.experience.collector import ExperienceCollector

PROMPT = load_exchange("hf_reference_logprobs")["prompt"]


def sglang_config(server, tmp_path, **overrides):
    settings = dict(model_path="<tiny-qwen3>", vocab_size=1024, update_dir=str(tmp_path),
                    pool=ReplicaPool.Config(urls=[server.url], max_attempts=1))
    return SGLangRollout.Config(**{**settings, **overrides})


def sglang_engine(server, tmp_path, **overrides):
    return sglang_config(server, tmp_path, **overrides).build()


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


@pytest.mark.parametrize("backend", ["sglang", "vllm"])
def test_start_up_check_of_the_rollout_servers(replay, tmp_path, backend):
    """Every replica must answer its health route with 200 and serve the engine's model folder; the error names
    the replica."""
    engine = {"sglang": sglang_engine, "vllm": vllm_engine}[backend]
    healthy, sick = replay(), replay("unhealthy")
    engine(healthy, tmp_path).check()
    both = engine(healthy, tmp_path, pool=ReplicaPool.Config(urls=[healthy.url, sick.url], max_attempts=1))
    with pytest.raises(RolloutError, match=f"rollout server {sick.url}{HEALTH_PATHS[backend]} answered 503"):
        both.check()
    with pytest.raises(RolloutError, match=rf"rollout server {healthy.url} serves .*'<tiny-qwen3>'.*expected "
                                           "'/models/other'"):
        engine(healthy, tmp_path, model_path="/models/other").check()
    healthy.kill()
    with pytest.raises(RolloutError, match=f"rollout server {healthy.url} failed its check: .*ClientConnectorError"):
        engine(healthy, tmp_path).check()


def test_a_fresh_run_checks_the_rollout_servers_and_a_resumed_one_resyncs_them(replay, tmp_path):
    """At start-up the trainer checks the servers of a fresh run; a resumed run's servers may still serve an earlier
    trainer's update, so it sends them the resumed weights (which probes every replica) instead."""
    from dnmopd.trainer.trainer import Trainer

    def start(server, start_update):
        synced = []
        trainer = SimpleNamespace(start_update=start_update, rollout_engine=sglang_engine(server, tmp_path),
                                  _sync_weights=lambda batch, version: synced.append(version),
                                  config=SimpleNamespace(rollout=SimpleNamespace(sync="disk", sender_dp_rank=0)),
                                  rollout_backend=SGLangRollout, dp_size=1, _sends_weights=True,
                                  _on_every_rank=lambda action: action())
        Trainer._start_rollout_engine(trainer)
        return synced

    sick = replay("unhealthy")
    with pytest.raises(RolloutError, match=f"rollout server {sick.url}/health_generate answered 503"):
        start(sick, start_update=0)
    assert start(replay(), start_update=0) == []
    assert start(sick, start_update=3) == [3]


def test_each_sample_is_scored_as_soon_as_its_rollout_finishes(tiny_model_dir):
    """The trainer's collector sends a response to its teacher while the rest of the batch is still generating."""
    engine = InProcessRollout.Config(model_path=str(tiny_model_dir), max_batch_size=1).build()
    teacher = InProcessTeacher.Config(name="math", model_path=str(tiny_model_dir)).build()
    finished, seen_at_scoring = [], []
    original_stream, original_score = engine.stream, teacher.score

    async def recording_stream(requests, params):
        async for rollout in original_stream(requests, params):
            finished.append(rollout.sample_id)
            yield rollout

    async def recording_score(request):
        seen_at_scoring.append(len(finished))
        return await original_score(request)

    engine.stream, teacher.score = recording_stream, recording_score
    collector = ExperienceCollector(engine, TeacherFleet.Config().build({"math": teacher}),
                                    sampling=SamplingParams(max_new_tokens=6, seed=0), samples_per_prompt=1,
                                    teachers_for=lambda domain: ["math"])
    prompts = [Prompt(i, tuple(PROMPT[: 3 + i]), "math", "", {}) for i in range(4)]
    experience = collector.collect(prompts, seed_offset=0)
    assert [s.prompt.index for s in experience.samples] == [0, 1, 2, 3]
    assert seen_at_scoring[0] == 1  # the first sample was sent while the other three were still generating
    rescored = InProcessTeacher.Config(name="ref", model_path=str(tiny_model_dir)).build().score_batch(
        [ScoreRequest(s.token_ids, len(s.prompt.prompt_ids)) for s in experience.samples])
    for sample, want in zip(experience.samples, rescored, strict=True):
        torch.testing.assert_close(sample.scores["math"], want.logprobs, atol=1e-5, rtol=0)
    assert experience.teacher_failures == {"math": 0} and len(experience.teacher_seconds["math"]) == 4


@pytest.mark.parametrize("temperature", [1e-7, 5e-6])
def test_a_temperature_the_servers_would_decode_greedily_is_refused(temperature):
    """SGLang decodes greedily below 1e-6 and vLLM below 1e-5 while reporting raw log-probs, which are not the
    log-probs of a distribution at that temperature: only 0 (greedy) or >= 1e-5 is taken."""
    with pytest.raises(ValueError, match=r"must be 0 \(greedy\) or >= 1e-05"):
        SamplingParams(temperature=temperature)
    assert SamplingParams(temperature=0).greedy and not SamplingParams(temperature=1e-5).greedy
