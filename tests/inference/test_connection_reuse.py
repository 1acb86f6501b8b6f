"""Blocking calls into the HTTP clients reuse one connection pool: N calls open one connection to a server, not
N (the server, replaying recorded SGLang answers over real sockets, counts the connections it accepted)."""

import json
import threading
import urllib.request

from scripted_rollouts import ScriptedRollouts
from test_teacher_faults import SAMPLES, assert_matches_hf, sglang
from wire_fixtures import load_exchange

from dnmopd.data.prompts import Prompt
from dnmopd.rollout.base import RolloutRequest, SamplingParams
from dnmopd.rollout.sglang import SGLangRollout
from dnmopd.serving.pool import ReplicaPool
from dnmopd.teachers.base import TeacherScores
from dnmopd.teachers.fleet import TeacherFleet
from dnmopd.trainer.experience.collector import ExperienceCollector

CALLS = 6


def connections(server) -> int:
    with urllib.request.urlopen(f"{server.url}/_connections", timeout=10) as answer:
        return json.load(answer)["connections"]


def test_blocking_teacher_calls_share_one_connection_until_closed(replay):
    server = replay()
    teacher = sglang(server)
    teacher.check()
    for i in range(CALLS):
        (scores,) = teacher.score_batch([SAMPLES[i % len(SAMPLES)]])
        assert_matches_hf(SAMPLES[i % len(SAMPLES)], scores)
    worker = threading.Thread(target=lambda: teacher.score_batch(SAMPLES[:1]))  # e.g. the rollout-ahead thread
    worker.start()
    worker.join()
    assert connections(server) == 1
    teacher.close()
    teacher.score_batch(SAMPLES[:1])  # a closed client opens a new pool when used again
    assert connections(server) == 2
    teacher.close()


def test_collections_and_rollout_batches_reuse_their_connections(replay, tmp_path):
    rollout_server, teacher_server = replay(), replay()
    teacher = sglang(teacher_server)
    prompts = [Prompt(i, s.token_ids[: s.prompt_len], "math", "", {}) for i, s in enumerate(SAMPLES)]
    collector = ExperienceCollector(ScriptedRollouts([s.response_ids for s in SAMPLES], interval_s=0.0),
                                    TeacherFleet.Config().build({"math": teacher}), sampling=SamplingParams(),
                                    samples_per_prompt=1, teachers_for=lambda domain: ["math"])
    engine = SGLangRollout.Config(model_path="<tiny-qwen3>", vocab_size=1024, update_dir=str(tmp_path),
                                  deterministic_server=True,
                                  pool=ReplicaPool.Config(urls=[rollout_server.url], max_attempts=1)).build()
    prompt = load_exchange("hf_reference_logprobs")["prompt"]
    recorded = load_exchange("sglang/sglang_22_generate_lsl_promptlen")["response"]["output_ids"]
    opened = None
    for _ in range(CALLS):
        samples = collector.collect(prompts, seed_offset=0).samples  # one rollout batch scored as it finishes
        for request, sample in zip(SAMPLES, samples, strict=True):
            assert_matches_hf(request, TeacherScores(sample.scores["math"]))
        (rollout,) = engine.generate_batch([RolloutRequest(prompt, 0)], SamplingParams(max_new_tokens=16, seed=1234))
        assert rollout.response_ids == recorded
        opened = opened or (connections(rollout_server), connections(teacher_server))
    # the first call's pools serve every later one (the concurrent scoring requests of a batch may open several)
    assert opened[0] == 1 and 1 <= opened[1] <= len(SAMPLES)
    assert (connections(rollout_server), connections(teacher_server)) == opened
    engine.close()
    teacher.close()
