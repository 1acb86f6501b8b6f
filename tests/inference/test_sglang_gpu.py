"""Qwen3.5 on a real SGLang server, on a GPU: its Gated DeltaNet layers run only through SGLang's Triton kernels,
so this cannot run on the CPU (see docs/serving.md). A tiny Qwen3.5 (real GDN head sizes) is served in bf16 and its
scores compared with transformers in fp32; skipped without CUDA."""

import json

import pytest
import torch
from sglang_servers import free_port, require_sglang
from tiny_checkpoints import VOCAB

from dnmopd.serving.pool import ReplicaPool
from dnmopd.serving.servers import ServerProcess, ServerSpec
from dnmopd.teachers.base import ScoreRequest
from dnmopd.teachers.inprocess import InProcessTeacher
from dnmopd.teachers.sglang import SGLangTeacher

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def tiny_qwen35(tmp_path_factory):
    from dnmopd.examples.tiny import build_tiny_hf_checkpoint
    from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

    root = tmp_path_factory.mktemp("tiny-qwen3.5")
    tokenizer = build_tiny_tokenizer(root / "tokenizer", flavor="qwen3.5", vocab_size=VOCAB)
    model = build_tiny_hf_checkpoint(root / "model", arch="qwen3_5", vocab_size=VOCAB, num_layers=4,
                                     tie_word_embeddings=True, tokenizer_dir=tokenizer,
                                     overrides={"head_dim": 128, "linear_key_head_dim": 128,
                                                "linear_value_head_dim": 128})
    config = json.loads((model / "config.json").read_text())
    config.setdefault("full_attention_interval", 4)  # SGLang reads it; the Hub configs carry it (3 GDN : 1 full)
    (model / "config.json").write_text(json.dumps(config, indent=2))
    return model


def test_tiny_qwen35_served_by_sglang_on_a_gpu_scores_like_transformers(tiny_qwen35, tmp_path):
    spec = ServerSpec(name="qwen3.5", backend="sglang", model_path=str(tiny_qwen35), port=free_port(),
                      python=str(require_sglang()), dtype="bfloat16",
                      extra_args=["--context-length", "1024", "--mem-fraction-static", "0.2"])
    server = ServerProcess(spec, tmp_path / "server.log").start()
    try:
        server.wait_healthy(timeout_s=900)
        teacher = SGLangTeacher.Config(name="t", model_path=str(tiny_qwen35), batch_request_size=2,
                                       pool=ReplicaPool.Config(urls=[spec.url], max_attempts=2)).build()
        teacher.check()
        generator = torch.Generator().manual_seed(0)
        requests = [ScoreRequest(torch.randint(3, VOCAB, (n,), generator=generator).tolist(), p)
                    for n, p in [(64, 20), (300, 200), (17, 3)]]
        reference = InProcessTeacher.Config(name="ref", model_path=str(tiny_qwen35)).build().score_batch(requests)
        for got, want in zip(teacher.score_batch(requests), reference, strict=True):
            difference = (got.logprobs.double() - want.logprobs.double()).abs()
            assert difference.mean() < 5e-2 and difference.max() < 0.3  # bf16 serving vs fp32 reference
    finally:
        server.stop()

