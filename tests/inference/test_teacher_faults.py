"""Teacher scoring over real sockets against processes replaying recorded SGLang / vLLM answers:
startup checks, retries, time-outs, failover, servers that die, and the failure policy of the trainer's
experience collection."""

import asyncio

import pytest
import torch
from scripted_rollouts import ScriptedRollouts
from wire_fixtures import load_exchange

from dnmopd.data.prompts import Prompt
from dnmopd.rollout.base import SamplingParams
from dnmopd.serving.errors import RequestRejected, ServerUnavailable
from dnmopd.serving.pool import ReplicaPool
from dnmopd.serving.token_ids import InvalidTokenIds
from dnmopd.teachers.base import ScoreRequest, TeacherError, TeacherScores
from dnmopd.teachers.fleet import TeacherBatchError, TeacherFleet
from dnmopd.teachers.sglang import SGLangTeacher
from dnmopd.teachers.vllm import VLLMTeacher
from dnmopd.trainer.experience.collector import ExperienceCollector

REF = load_exchange("hf_reference_logprobs")
SEQ = REF["seq"]
HF = torch.tensor(REF["tiny-qwen3"]["token_logprobs"][1:], dtype=torch.float64)
# the samples whose single-request answers were recorded (directly or as items of a batch)
SAMPLES = [ScoreRequest(SEQ, 10), ScoreRequest(SEQ[:12], 4), ScoreRequest(SEQ[:5], 1)]
MODEL = "<tiny-qwen3>"


def pool(*servers, **overrides):
    settings = dict(request_timeout_s=2.0, connect_timeout_s=1.0, max_attempts=3, backoff_initial_s=0.01,
                    backoff_max_s=0.05, backoff_jitter_s=0.01, cooldown_s=30.0, failures_before_cooldown=1,
                    balance="round_robin")
    settings.update(overrides)
    return ReplicaPool.Config(urls=[s.url for s in servers], **settings)


def sglang(*servers, name="math", **overrides):
    return SGLangTeacher.Config(name=name, model_path=MODEL, vocab_size=1024, batch_request_size=1,
                                pool=pool(*servers, **overrides)).build()


def assert_matches_hf(request, scores):
    expected = HF[request.prompt_len - 1 : len(request.token_ids) - 1]
    torch.testing.assert_close(scores.logprobs.double(), expected, atol=1e-6, rtol=0)


def many(count):
    return [SAMPLES[i % len(SAMPLES)] for i in range(count)]


def test_startup_checks(replay):
    server = replay()
    sglang(server).check()
    wrong = SGLangTeacher.Config(name="math", model_path="/models/other", vocab_size=1024, pool=pool(server))
    with pytest.raises(TeacherError, match=r"serves '<tiny-qwen3>', expected '/models/other'"):
        wrong.build().check()
    VLLMTeacher.Config(name="code", model_path=MODEL, vocab_size=1024, pool=pool(server)).build().check()
    server.kill()
    with pytest.raises(TeacherError, match="is not reachable"):
        sglang(server).check()


@pytest.mark.parametrize("backend", ["sglang", "vllm"])
@pytest.mark.parametrize("batch_request_size", [1, 3])
def test_scores_over_sockets_equal_the_hf_reference(replay, backend, batch_request_size):
    server = replay()
    config_class = SGLangTeacher.Config if backend == "sglang" else VLLMTeacher.Config
    teacher = config_class(name="math", model_path=MODEL, vocab_size=1024, pool=pool(server),
                           batch_request_size=batch_request_size).build()
    for request, scores in zip(SAMPLES, teacher.score_batch(SAMPLES), strict=True):
        assert_matches_hf(request, scores)
    assert teacher.pool.counters["failed_attempts"] == 0


@pytest.mark.parametrize("bad_behavior", ["slow:5", "http500"])
def test_a_slow_or_failing_replica_is_failed_over(replay, bad_behavior):
    bad, good = replay(bad_behavior), replay()
    teacher = sglang(bad, good, request_timeout_s=0.5)
    requests = many(12)
    for request, scores in zip(requests, teacher.score_batch(requests), strict=True):
        assert_matches_hf(request, scores)
    assert teacher.pool.counters["failed_attempts"] >= 1
    assert teacher.pool.replicas[0].consecutive_failures >= 1  # the bad one is cooling down


def test_a_replica_dying_in_the_middle_of_a_batch_loses_nothing(replay):
    dying, good = replay("die_after:4"), replay()
    teacher = sglang(dying, good, max_connections_per_replica=2)
    requests = many(30)
    results = teacher.score_batch(requests)
    assert len(results) == 30
    for request, scores in zip(requests, results, strict=True):
        assert_matches_hf(request, scores)
    assert dying.process.wait(timeout=5) != 0  # it really died
    assert teacher.pool.counters["failed_attempts"] >= 1


def test_all_replicas_down_raises_with_the_history(replay):
    server = replay()
    server.kill()
    teacher = sglang(server)
    with pytest.raises(ServerUnavailable, match="all 3 attempts failed"):
        teacher.score_batch(SAMPLES[:1])


def test_retrying_is_bounded_in_time(replay):
    server = replay()
    server.kill()
    teacher = sglang(server, max_attempts=1000, retry_timeout_s=0.5, backoff_initial_s=0.05, backoff_max_s=0.1)
    with pytest.raises(ServerUnavailable, match=r"attempts failed in 0\.\d s"):
        teacher.score_batch(SAMPLES[:1])
    assert 3 <= teacher.pool.counters["failed_attempts"] < 20


def test_a_replica_in_cooldown_rejoins_once_its_health_check_passes(replay):
    dying, good = replay("die_after:2"), replay()
    port = int(dying.url.rsplit(":", 1)[1])
    teacher = sglang(dying, good, cooldown_s=600.0, health_check_interval_s=0.1)
    first = teacher.pool.replicas[0]

    async def run():
        try:
            results = await teacher.score_many(many(8))
            assert first.cooldown_until > 0  # it died: out of rotation for up to 10 minutes
            dying.process.wait(timeout=5)
            replay(port=port)  # back on its port: the health re-check lets it rejoin at once
            for _ in range(100):
                if first.cooldown_until == 0:
                    break
                await asyncio.sleep(0.05)
            picks = first.last_pick
            return results + await teacher.score_many(many(6)), picks
        finally:
            await teacher.aclose()

    results, picks = asyncio.run(run())
    assert first.cooldown_until == 0 and first.last_pick > picks  # healthy again and chosen again
    for request, scores in zip(many(8) + many(6), results, strict=True):
        assert_matches_hf(request, scores)


def test_client_errors_are_not_retried(replay):
    teacher = sglang(replay())
    unrecorded = ScoreRequest(SEQ[:7], 3)  # the replay answers 404 for anything not recorded
    with pytest.raises(RequestRejected, match="HTTP 404"):
        teacher.score_batch([unrecorded])
    assert teacher.pool.counters["requests"] == 1


def test_out_of_vocabulary_ids_never_reach_the_server(replay):
    server = replay()
    teacher = sglang(server)
    with pytest.raises(InvalidTokenIds, match="token id 1024 at position 3"):
        teacher.score_batch([ScoreRequest([370, 28, 345, 1024, 5], 2)])
    assert server.process.poll() is None and teacher.pool.counters["requests"] == 0
    assert_matches_hf(SAMPLES[0], teacher.score_batch(SAMPLES[:1])[0])


def _kill_during_scoring(fleet, server, count=24):
    """Collect `count` responses (one every 30 ms) of prompts alternating math/code, each scored by its domain's
    teacher as it finishes; SIGKILL the math server once it has scored 3."""

    async def kill_after_three(index):
        if fleet.scored["math"] >= 3:
            server.kill()

    samples = [SAMPLES[i % 3] for i in range(count)]
    prompts = [Prompt(i, s.token_ids[: s.prompt_len], ("math", "code")[i % 2], "", {}) for i, s in enumerate(samples)]
    engine = ScriptedRollouts([s.response_ids for s in samples], interval_s=0.03, before=kill_after_three)
    collector = ExperienceCollector(engine, fleet, sampling=SamplingParams(), samples_per_prompt=1,
                                    teachers_for=lambda domain: [domain])
    return collector.collect(prompts, seed_offset=0)


def test_a_killed_teacher_is_masked_and_counted(replay, caplog):
    math_server, code_server = replay(), replay()
    fleet = TeacherFleet.Config(on_failure="mask").build(
        {"math": sglang(math_server, max_attempts=2), "code": sglang(code_server, name="code")}
    )
    experience = _kill_during_scoring(fleet, math_server)
    samples = experience.samples
    assert [s.prompt.index for s in samples] == list(range(24))  # nothing lost, nothing duplicated
    failed = [s for s in samples if s.scores[s.domain] is None]
    assert failed and all(s.domain == "math" for s in failed)
    assert fleet.failures == {"math": len(failed)} and experience.teacher_failures == {"math": len(failed), "code": 0}
    assert fleet.scored["math"] >= 3 and fleet.scored["code"] == 12
    warnings = [r.getMessage() for r in caplog.records if "teacher math failed on sample" in r.getMessage()]
    assert len(warnings) == len(failed) and all("attempts failed" in w for w in warnings)
    for sample in samples:
        if sample.scores[sample.domain] is not None:
            assert_matches_hf(ScoreRequest(sample.token_ids, len(sample.prompt.prompt_ids)),
                              TeacherScores(sample.scores[sample.domain]))


def test_a_killed_teacher_stops_the_batch_under_the_stop_policy(replay):
    math_server, code_server = replay(), replay()
    fleet = TeacherFleet.Config(on_failure="stop").build(
        {"math": sglang(math_server, max_attempts=2), "code": sglang(code_server, name="code")}
    )
    with pytest.raises(TeacherBatchError, match=r"teacher math failed on sample \d+: .*attempts failed"):
        _kill_during_scoring(fleet, math_server)
    assert fleet.failures["math"] >= 1
