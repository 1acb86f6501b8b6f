"""Weight updates broadcast over a process group into a real SGLang server (SGLang 0.5.23 on the CPU, gloo).

One server serves the tiny tied Qwen3 in fp32; this test process is the group's rank 0. Every update is checked
against transformers: the probe (tolerance 1e-4) and the server's greedy continuation. Broadcasts in flat
buckets and per tensor; a server that hangs mid-update (SIGSTOP) and one that dies (SIGKILL) fail the update
within the configured bound, naming the server; a restarted server refuses to serve between updates (no folder
holds the broadcast weights) and is re-synced by the next update through a new group; a second engine that only
adopted the first one's sync state (another data-parallel leader) refuses the restarted server as well. The
SGLang teacher passes its self-test on the same server.
"""

import os
import signal
import time
import urllib.request
from contextlib import contextmanager

import pytest
import torch
from tiny_checkpoints import perturbed_state

from dnmopd.data.chat import PromptTokenizer
from dnmopd.rollout.base import RolloutRequest, SamplingParams, WeightProbe, WeightUpdateError
from dnmopd.rollout.sglang import SGLangRollout
from dnmopd.serving.pool import ReplicaPool
from dnmopd.serving.weight_group import CLEANUP_TIMEOUT_S, WeightGroup
from dnmopd.teachers.base import ScoreRequest
from dnmopd.teachers.inprocess import InProcessTeacher
from dnmopd.teachers.self_test import self_test
from dnmopd.teachers.sglang import SGLangTeacher

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # a server start and a restart

PROMPT = [370, 28, 345, 340, 289, 264, 289, 33, 360, 28]
PROBE = ScoreRequest(tuple(PROMPT + [362, 16, 223, 274, 277, 291]), len(PROMPT))
GREEDY = SamplingParams(temperature=0, max_new_tokens=6)


def served_version(server):
    import json

    with urllib.request.urlopen(server.url + "/get_model_info", timeout=30) as answer:
        return json.loads(answer.read())["weight_version"]


def engine_for(server, model_dir, tmp_path):
    pool = ReplicaPool.Config(urls=[server.url], request_timeout_s=60, max_attempts=2)
    return SGLangRollout.Config(model_path=str(model_dir), pool=pool, update_dir=str(tmp_path / "updates")).build()


def updated_model(model_dir, state):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    model.load_state_dict(state, strict=False)
    return model


def probe_for(model_dir, model):
    reference = InProcessTeacher(InProcessTeacher.Config(name="ref", model_path=str(model_dir)), model=model)
    return WeightProbe(PROBE.token_ids, PROBE.prompt_len, reference.score_batch([PROBE])[0].logprobs, tolerance=1e-4)


def greedy_ids(model, prompt, steps):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=steps, do_sample=False, eos_token_id=None,
                             pad_token_id=0, top_p=None, top_k=None, temperature=None)
    return out[0, len(prompt):].tolist()


def send(engine, model_dir, seed, tensors=None):
    """Broadcast a perturbed state (`tensors` may wrap its items); returns the model it should serve."""
    state = perturbed_state(model_dir, seed=seed)
    model = updated_model(model_dir, state)
    engine.update_weights(tensors(state.items()) if tensors else state.items(), probe_for(model_dir, model))
    return model


def assert_serves(engine, model):
    rollout = engine.generate_batch([RolloutRequest(PROMPT, 0)], GREEDY)[0]
    assert rollout.response_ids == greedy_ids(model, PROMPT, GREEDY.max_new_tokens)


def signal_server(server, sig):
    os.killpg(server.process.process.pid, sig)


def after(count, action):
    """Wrap a tensor iterator: run `action` (once) when the `count`-th tensor is asked for, mid-update."""
    def wrap(items):
        for index, item in enumerate(items):
            if index == count:
                action()
            yield item
    return wrap


@contextmanager
def elapsed():
    box = {}
    started = time.monotonic()
    yield box
    box["s"] = time.monotonic() - started


def test_an_sglang_teacher_passes_the_self_test(tiny_sglang, tiny_model_dir):
    teacher = SGLangTeacher.Config(name="math", model_path=str(tiny_model_dir),
                                   pool=ReplicaPool.Config(urls=[tiny_sglang.url])).build()
    student = PromptTokenizer.from_pretrained(tiny_model_dir)
    try:
        result = self_test(teacher, teacher_path=tiny_model_dir, student=student, student_vocab=1024)
    finally:
        teacher.close()
    assert result.passed, result.summary()
    assert result.measured["repeat_max_abs_diff"] < 1e-4  # the second scoring comes from the radix cache


def test_broadcast_updates_serve_exactly_the_new_weights(tiny_sglang, tiny_model_dir, tmp_path):
    for flatten, seed in ((True, 11), (False, 12)):
        engine = engine_for(tiny_sglang, tiny_model_dir, tmp_path)
        try:
            engine.join_weight_group(WeightGroup.Config(bucket_mb=0.1, flatten=flatten, timeout_s=30))
            assert served_version(tiny_sglang) == "step-0"  # joining labels the server with the engine's version
            model = send(engine, tiny_model_dir, seed)
            assert engine.last_send.buckets > 1 and engine.last_send.tensors == 24
            assert served_version(tiny_sglang) == "step-1"
            assert_serves(engine, model)
            assert not (tmp_path / "updates").exists()  # nothing went through the disk
        finally:
            engine.close()


def test_a_hung_or_dead_server_fails_the_update_in_bound_and_a_restarted_one_is_resynced(
        tiny_sglang, tiny_model_dir, tmp_path):
    timeout_s = 4.0
    engine = engine_for(tiny_sglang, tiny_model_dir, tmp_path)
    other_leader = engine_for(tiny_sglang, tiny_model_dir, tmp_path)
    try:
        engine.join_weight_group(WeightGroup.Config(bucket_mb=0.05, timeout_s=timeout_s, join_timeout_s=30))
        model = send(engine, tiny_model_dir, seed=21)
        other_leader.adopt_sync_state(engine.sync_state())
        assert_serves(other_leader, model)

        with elapsed() as hung, pytest.raises(WeightUpdateError, match=tiny_sglang.url) as error:
            send(engine, tiny_model_dir, seed=22, tensors=after(10, lambda: signal_server(tiny_sglang, signal.SIGSTOP)))
        assert hung["s"] < timeout_s + CLEANUP_TIMEOUT_S + 5, (hung, error.value)
        assert "no answer within" in str(error.value) or "Timed out" in str(error.value)

        tiny_sglang.restart()  # SIGKILL (a stopped process dies of it too), then back on the original weights
        for leader in (engine, other_leader):  # no folder holds step-1: the rollout is refused, never used
            with pytest.raises(WeightUpdateError, match="no folder holds them"):
                leader.generate_batch([RolloutRequest(PROMPT, 0)], GREEDY)
        model = send(engine, tiny_model_dir, seed=23)  # a new group; the broadcast re-syncs the restarted server
        assert served_version(tiny_sglang) == "step-2"
        assert_serves(engine, model)

        with elapsed() as dead, pytest.raises(WeightUpdateError, match=tiny_sglang.url):
            send(engine, tiny_model_dir, seed=24, tensors=after(10, tiny_sglang.kill))
        assert dead["s"] < timeout_s + CLEANUP_TIMEOUT_S, dead
    finally:
        engine.close()
        other_leader.close()
