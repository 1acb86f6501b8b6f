"""In-process rollout: log-probs equal a re-scoring of the generated tokens; sampling semantics; weights."""

import pytest
import torch
from tiny_checkpoints import perturbed_state
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from dnmopd.rollout.base import RolloutRequest, SamplingParams, WeightProbe, WeightUpdateError
from dnmopd.rollout.inprocess import InProcessRollout
from dnmopd.teachers.base import ScoreRequest
from dnmopd.teachers.inprocess import InProcessTeacher

PROMPTS = [[370, 28, 345, 340, 289, 264, 289, 33, 360, 28], [5, 6], [100, 200, 300, 400, 500]]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return InProcessRollout.Config(model_path=str(tiny_model_dir), max_batch_size=2).build()


def requests(prompts=PROMPTS):
    return [RolloutRequest(p, i) for i, p in enumerate(prompts)]


def hf_sampling_logprobs(model, rollout, params):
    """float64 log q of each response token from one full forward and transformers' own logits warpers."""
    ids = rollout.prompt_ids + rollout.response_ids
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, len(rollout.prompt_ids) - 1 : -1].double()
    warpers = LogitsProcessorList([TemperatureLogitsWarper(params.temperature)])
    if params.top_k != -1:
        warpers.append(TopKLogitsWarper(params.top_k))
    if params.top_p < 1:
        warpers.append(TopPLogitsWarper(params.top_p))
    warped = warpers(torch.tensor([ids]), logits)
    return torch.log_softmax(warped, -1).gather(1, torch.tensor(rollout.response_ids)[:, None]).squeeze(1)


def test_generation_logprobs_equal_a_rescoring_of_the_generated_tokens(engine, tiny_model_dir):
    params = SamplingParams(max_new_tokens=12, seed=7)
    rollouts = engine.generate_batch(requests(), params)
    teacher = InProcessTeacher.Config(name="rescore", model_path=str(tiny_model_dir)).build()
    rescored = teacher.score_batch([ScoreRequest(r.prompt_ids + r.response_ids, len(r.prompt_ids)) for r in rollouts])
    for rollout, scores in zip(rollouts, rescored, strict=True):
        assert rollout.logprobs.dtype == torch.float32 and len(rollout.logprobs) == len(rollout.response_ids)
        torch.testing.assert_close(rollout.logprobs, scores.logprobs, atol=2e-5, rtol=0)


@pytest.mark.parametrize("temperature,top_k,top_p", [(0.7, -1, 1.0), (1.3, 20, 1.0), (0.8, -1, 0.6), (1.0, 8, 0.7)])
def test_logprobs_are_those_of_the_distribution_sampled(engine, tiny_hf_model, temperature, top_k, top_p):
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=10, seed=1)
    for rollout in engine.generate_batch(requests(), params):
        expected = hf_sampling_logprobs(tiny_hf_model, rollout, params)
        assert bool(torch.isfinite(expected).all())  # every sampled token lies in the kept set
        torch.testing.assert_close(rollout.logprobs.double(), expected, atol=2e-5, rtol=0)


def test_greedy_reports_raw_logprobs_of_the_argmax(engine, tiny_hf_model):
    rollout = engine.generate_batch(requests(PROMPTS[:1]), SamplingParams(temperature=0, max_new_tokens=6))[0]
    ids = rollout.prompt_ids + rollout.response_ids
    with torch.no_grad():
        logits = tiny_hf_model(torch.tensor([ids])).logits[0, len(rollout.prompt_ids) - 1 : -1].double()
    assert rollout.response_ids == logits.argmax(-1).tolist()
    raw = torch.log_softmax(logits, -1).max(-1).values
    torch.testing.assert_close(rollout.logprobs.double(), raw, atol=2e-5, rtol=0)


def test_seeded_samples_do_not_depend_on_the_batch(engine):
    params = SamplingParams(max_new_tokens=8, seed=11)
    together = engine.generate_batch(requests(), params)
    alone = engine.generate_batch([RolloutRequest(PROMPTS[2], 2)], params)[0]
    assert alone.response_ids == together[2].response_ids
    other_seed = engine.generate_batch([RolloutRequest(PROMPTS[2], 2)], SamplingParams(max_new_tokens=8, seed=12))
    assert other_seed[0].response_ids != alone.response_ids


def test_stop_ids_end_the_response_and_stay_in_it(engine):
    stop_ids = tuple(range(3, 700))  # most of the vocabulary: every response stops within a few tokens
    params = SamplingParams(max_new_tokens=16, stop_token_ids=stop_ids, seed=3)
    enders = set(stop_ids) | set(engine.eos_ids)
    assert engine.eos_ids  # read from the checkpoint's generation config
    for rollout in engine.generate_batch(requests(), params):
        assert rollout.finish_reason == "stop"
        assert rollout.response_ids[-1] in enders
        assert not set(rollout.response_ids[:-1]) & enders
    for rollout in engine.generate_batch(requests(), SamplingParams(max_new_tokens=5, seed=3)):
        if rollout.finish_reason == "length":
            assert len(rollout.response_ids) == 5


def test_update_weights_in_memory_then_probe(tiny_model_dir, tiny_hf_model):
    from transformers import AutoModelForCausalLM

    engine = InProcessRollout.Config(model_path=str(tiny_model_dir)).build()
    new_state = perturbed_state(tiny_model_dir, seed=1)
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    reference.load_state_dict(new_state, strict=False)
    probe_ids = PROMPTS[0] + [362, 16, 223, 274]
    teacher = InProcessTeacher(InProcessTeacher.Config(name="new", model_path=str(tiny_model_dir)), model=reference)
    expected = teacher.score_batch([ScoreRequest(probe_ids, 10)])[0].logprobs
    old = InProcessTeacher(InProcessTeacher.Config(name="old", model_path=str(tiny_model_dir)), model=tiny_hf_model)
    stale = old.score_batch([ScoreRequest(probe_ids, 10)])[0].logprobs
    assert (expected - stale).abs().mean() > 0.05  # the probe can tell the two models apart

    engine.update_weights(new_state.items(), WeightProbe(tuple(probe_ids), 10, expected, tolerance=1e-5))
    with pytest.raises(WeightUpdateError, match="not serving the new weights"):
        engine.update_weights(new_state.items(), WeightProbe(tuple(probe_ids), 10, stale, tolerance=1e-5))
    with pytest.raises(ValueError, match="no tensor given for"):
        engine.update_weights(list(new_state.items())[:3], WeightProbe(tuple(probe_ids), 10, expected))
    with pytest.raises(KeyError, match="'model.bogus.weight' is not a parameter"):
        engine.update_weights([("model.bogus.weight", torch.zeros(1))], WeightProbe(tuple(probe_ids), 10, expected))


def test_sampling_params_validation():
    with pytest.raises(ValueError, match="top_p=0"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="top_k=0"):
        SamplingParams(top_k=0)
    with pytest.raises(ValueError, match="temperature=-1"):
        SamplingParams(temperature=-1)
