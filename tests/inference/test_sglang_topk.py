"""Top-k teacher scores from a real SGLang server (SGLang 0.5.23 on the CPU, `make sglang-env`), one server for the
module: the flat base64 top-k equals the in-process backend's on the same model within 1e-5 (single and batched
POSTs, mixed k), and a 2-update topk_reverse_kl run with SGLang teachers trains on the same top-k KL as the same
run with in-process teachers."""

import json
import math
from pathlib import Path

import pytest
import torch
from sglang_servers import SGLangServer
from tiny_checkpoints import VOCAB

from dnmopd.config import load_config
from dnmopd.serving.pool import ReplicaPool
from dnmopd.teachers.base import ScoreRequest
from dnmopd.teachers.inprocess import InProcessTeacher
from dnmopd.teachers.sglang import SGLangTeacher
from dnmopd.trainer.config import TrainerConfig
from dnmopd.trainer.entry import run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # one server start and four short trainer runs

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo_cpu.yaml"
DOMAINS = ("math", "code", "ifeval")
CONTEXT = 2048
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny tied Qwen3 student and one tiny Qwen3 teacher sharing the tiny Qwen3 tokenizer."""
    from dnmopd.examples.tiny import build_tiny_hf_checkpoint
    from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

    root = tmp_path_factory.mktemp("topk-models")
    tokenizer = build_tiny_tokenizer(root / "tokenizer", flavor="qwen3", vocab_size=VOCAB)
    for seed, name in enumerate(("student", "teacher")):
        build_tiny_hf_checkpoint(root / name, arch="qwen3", vocab_size=VOCAB, seed=seed, num_layers=2,
                                 tie_word_embeddings=True, tokenizer_dir=tokenizer)
    return root


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    server = SGLangServer(models / "teacher", tmp_path_factory.mktemp("sglang-topk"), context_length=CONTEXT)
    try:
        yield server.start()
    finally:
        server.stop()


def sglang_teacher(models, url, name="teacher", **options):
    return SGLangTeacher.Config(name=name, model_path=str(models / "teacher"), pool=ReplicaPool.Config(urls=[url]),
                                **options).build()


def test_topk_equals_the_inprocess_backend(models, server):
    generator = torch.Generator().manual_seed(5)
    requests = []
    for prompt_len, response_len, top_k in [(30, 40, 64), (5, 9, 8), (60, 1, 64), (12, 25, 1)]:
        ids = torch.randint(3, VOCAB - 2, (prompt_len + response_len,), generator=generator).tolist()
        requests.append(ScoreRequest(ids, prompt_len, top_k=top_k))
    remote = sglang_teacher(models, server.url, batch_request_size=2)
    local = InProcessTeacher.Config(name="teacher", model_path=str(models / "teacher")).build()
    try:
        batched = remote.score_batch(requests)  # two POSTs of two samples, each with its own k
        single = [remote.score_batch([r])[0] for r in requests]  # one POST per sample
    finally:
        remote.close()
    expected = local.score_batch(requests)
    for request, ours, *served in zip(requests, expected, batched, single, strict=True):
        for got in served:
            assert got.topk_ids.shape == (request.response_len, request.top_k)
            torch.testing.assert_close(got.logprobs, ours.logprobs, atol=TOLERANCE, rtol=0)
            torch.testing.assert_close(got.topk_logprobs, ours.topk_logprobs, atol=TOLERANCE, rtol=0)
            # the same tokens: where an order differs, the two log-probs tie within the tolerance
            differ = got.topk_ids != ours.topk_ids
            assert differ.sum() <= 2, "top-k ids differ beyond a near tie"
    assert remote.pool.counters["isolated_chunks"] == 0


def overrides(models, run_dir, backend, url):
    if backend == "sglang":
        teacher = (f"backend: sglang, model_path: {models / 'teacher'}, pool: {{urls: [{url}]}}, "
                   "batch_request_size: 4")
    else:
        teacher = f"backend: inprocess, model_path: {models / 'teacher'}"
    teachers = ", ".join(f"{{name: {d}_teacher, {teacher}}}" for d in DOMAINS)  # one model serves every domain
    return [f"run.output_dir={run_dir}", "run.name=run", f"student.hf_path={models / 'student'}",
            f"rollout.engine.model_path={models / 'student'}", f"teachers.models=[{teachers}]",
            "train.updates=2", "data.sampler.prompts_per_rollout=3", "data.samples_per_prompt=2",
            "data.max_prompt_tokens=1024", "rollout.sampling.max_new_tokens=8", "checkpoint.export_hf=false",
            "logging.progress=false", "logging.report=false", "logging.metrics.tensorboard=false",
            "logging.probe_every=0", "optimizer.lr=1e-3", "optimizer.lr_warmup_updates=0",
            "method.loss.kind=topk_reverse_kl", "method.loss.topk=16", "teachers.fleet.on_failure=stop"]


def test_two_updates_with_sglang_teachers_train_on_the_inprocess_top_k(models, server, tmp_path):
    records = {}
    for backend in ("sglang", "inprocess"):
        run(load_config(TrainerConfig, [DEMO], overrides(models, tmp_path / backend, backend, server.url)))
        lines = (tmp_path / backend / "run" / "metrics.jsonl").read_text().splitlines()
        records[backend] = [json.loads(line) for line in lines]
    served, local = records["sglang"], records["inprocess"]
    assert [r["step"] for r in served] == [0, 1]
    for record in served:
        assert math.isfinite(record["loss"]) and record["kl_topk/all"] > 0
        assert all(record.get(f"teacher/{d}_teacher/failures", 0) == 0 for d in DOMAINS)
        assert all(0 < record[f"topk_mass/teacher/{d}"] < 1 for d in DOMAINS if f"topk_mass/teacher/{d}" in record)
    # update 0: the same batch (same student, seeds, in-process rollout) scored by the same teacher model
    assert served[0]["response_tokens"] == local[0]["response_tokens"]
    compared = [k for k in local[0] if k.startswith(("kl_topk/", "topk_mass/", "dn/")) and k.endswith(
        ("all", "math", "code", "ifeval", "/std"))]
    assert "kl_topk/all" in compared and len(compared) >= 8
    for key in compared:
        assert served[0][key] == pytest.approx(local[0][key], rel=1e-4, abs=1e-6), key
    assert served[0]["loss"] == pytest.approx(local[0]["loss"], rel=1e-4)
