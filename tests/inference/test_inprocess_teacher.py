"""The in-process teacher equals a plain, unbatched forward pass of the same transformers model."""

import asyncio

import pytest
import torch
from tiny_checkpoints import reference_logprobs

from dnmopd.serving.token_ids import InvalidTokenIds
from dnmopd.teachers.base import ScoreRequest
from dnmopd.teachers.inprocess import InProcessTeacher


def _requests():
    generator = torch.Generator().manual_seed(3)
    requests = []
    for prompt_len, response_len in [(10, 8), (3, 17), (25, 1), (1, 4), (7, 7)]:
        ids = torch.randint(3, 1024, (prompt_len + response_len,), generator=generator).tolist()
        requests.append(ScoreRequest(ids, prompt_len))
    return requests


@pytest.mark.parametrize("max_batch_tokens", [64, 100_000])
def test_scores_equal_a_direct_forward_pass(tiny_model_dir, tiny_hf_model, max_batch_tokens):
    config = InProcessTeacher.Config(name="math", model_path=str(tiny_model_dir), top_k=4,
                                     return_hidden_states=True, max_batch_tokens=max_batch_tokens,
                                     logit_chunk_tokens=5)
    teacher = config.build()
    requests = _requests()
    scores = teacher.score_batch(requests)
    for request, result in zip(requests, scores, strict=True):
        expected = reference_logprobs(tiny_hf_model, list(request.token_ids))[request.prompt_len - 1 :]
        assert result.logprobs.dtype == torch.float32
        torch.testing.assert_close(result.logprobs.double(), expected, atol=2e-5, rtol=0)
        with torch.no_grad():
            logits = tiny_hf_model(torch.tensor([request.token_ids])).logits[0, request.prompt_len - 1 : -1]
        top = torch.log_softmax(logits.double(), -1).topk(4, dim=-1)
        torch.testing.assert_close(result.topk_logprobs.double(), top.values, atol=2e-5, rtol=0)
        assert torch.equal(result.topk_ids, top.indices)
        # hidden states x LM head reproduce the logits (the fused full-vocab KL relies on this)
        recomputed = result.hidden_states @ teacher.output_weight.T
        torch.testing.assert_close(recomputed, logits, atol=2e-4, rtol=0)


def test_async_scoring_batches_concurrent_requests(tiny_model_dir, tiny_hf_model):
    teacher = InProcessTeacher.Config(name="code", model_path=str(tiny_model_dir)).build()
    requests = _requests()

    async def run():
        return await asyncio.gather(*(teacher.score(r) for r in requests))

    for request, result in zip(requests, asyncio.run(run()), strict=True):
        expected = reference_logprobs(tiny_hf_model, list(request.token_ids))[request.prompt_len - 1 :]
        torch.testing.assert_close(result.logprobs.double(), expected, atol=2e-5, rtol=0)


def test_out_of_vocabulary_ids_are_rejected_before_the_forward(tiny_model_dir):
    teacher = InProcessTeacher.Config(name="if", model_path=str(tiny_model_dir)).build()
    with pytest.raises(InvalidTokenIds, match="token id 1024 at position 2"):
        teacher.score_batch([ScoreRequest([5, 6, 1024, 7], 2)])
    with pytest.raises(ValueError, match="prompt_len=4"):
        ScoreRequest([5, 6, 7, 8], 4)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="InProcessTeacher.Config.dtype='fp8'"):
        InProcessTeacher.Config(name="x", model_path="/nowhere", dtype="fp8")
    with pytest.raises(FileNotFoundError, match="/nowhere: not a Hugging Face model folder"):
        InProcessTeacher.Config(name="x", model_path="/nowhere").build()
