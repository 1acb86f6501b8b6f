"""The trainer's own path against a real SGLang server (SGLang 0.5.23 on the CPU, `make sglang-env`).

A 2-update DN-MOPD run of a tiny tied Qwen3 student uses SGLang as its rollout engine: after every update
the trainer sends its weights (`Trainer._send_weights`: HF tensors, update folder, probe of the trainer's
own log-probs), so the rollout log-probs of update 2 must equal the trainer's. The run's Hugging Face
release is then served by SGLang and compared with transformers: prompt log-probs and greedy continuations.
"""

import json
import urllib.request
from pathlib import Path

import pytest
import torch
from sglang_servers import SGLangServer
from tiny_checkpoints import VOCAB, reference_logprobs

from dnmopd.config import load_config
from dnmopd.trainer.config import TrainerConfig
from dnmopd.trainer.entry import run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # two server starts and a trainer run

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo_cpu.yaml"
DOMAINS = ("math", "code", "ifeval")
CONTEXT = 2048


@pytest.fixture(scope="module")
def qwen3_models(tmp_path_factory):
    """A tiny tied Qwen3 student and three tiny Qwen3 teachers sharing the tiny Qwen3 tokenizer."""
    from dnmopd.examples.tiny import build_tiny_hf_checkpoint
    from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

    root = tmp_path_factory.mktemp("qwen3-run-models")
    tokenizer = build_tiny_tokenizer(root / "tokenizer", flavor="qwen3", vocab_size=VOCAB)
    for seed, name in enumerate(("student", *(f"{d}_teacher" for d in DOMAINS))):
        build_tiny_hf_checkpoint(root / name, arch="qwen3", vocab_size=VOCAB, seed=seed, num_layers=2,
                                 tie_word_embeddings=True, tokenizer_dir=tokenizer)
    return root


def overrides(models, run_dir, url):
    teachers = ", ".join(f"{{backend: inprocess, name: {d}_teacher, model_path: {models / f'{d}_teacher'}}}"
                         for d in DOMAINS)
    engine = (f"{{backend: sglang, model_path: {models / 'student'}, update_dir: {run_dir / 'updates'}, "
              f"pool: {{urls: [{url}]}}}}")
    return [f"run.output_dir={run_dir}", "run.name=run", f"student.hf_path={models / 'student'}",
            f"rollout.engine={engine}", "rollout.sampling.seed=null", f"teachers.models=[{teachers}]",
            "train.updates=2", "data.sampler.prompts_per_rollout=3", "data.samples_per_prompt=2",
            "data.max_prompt_tokens=1024", "rollout.sampling.max_new_tokens=8", "checkpoint.export_hf=true",
            "logging.progress=false", "logging.report=false", "logging.metrics.tensorboard=false",
            "optimizer.lr=1e-3", "optimizer.lr_warmup_updates=0"]


def get_json(url):
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.loads(answer.read())


def post_json(url, body):
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.loads(answer.read())


def test_a_trainer_run_on_sglang_and_its_release_served_by_sglang(qwen3_models, tmp_path):
    from transformers import AutoModelForCausalLM

    server = SGLangServer(qwen3_models / "student", tmp_path / "logs", context_length=CONTEXT)
    try:
        server.start()
        config = load_config(TrainerConfig, [DEMO], overrides(qwen3_models, tmp_path, server.url))
        run(config)
        info = get_json(server.url + "/get_model_info")  # synced (and probed) after each of the 2 updates
        assert info["weight_version"] == "step-2" and info["model_path"].endswith("updates/step-2")
    finally:
        server.stop()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1]
    for record in records:  # the trainer's log-probs of SGLang's rollouts equal SGLang's own: same weights
        assert record["train_rollout_logprob_abs_diff"] < 1e-4, record

    release = tmp_path / "run" / "release"
    model = AutoModelForCausalLM.from_pretrained(release, dtype=torch.float32).eval()
    server = SGLangServer(release, tmp_path / "logs", name="release", context_length=CONTEXT)
    try:
        server.start()
        prompts = [list(range(40, 90)), [7, 99, 3, 500, 21, 8, 777, 64], list(range(900, 1000, 3))]
        for ids in prompts:
            body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 8, "temperature": 0},
                    "return_logprob": True, "logprob_start_len": 0}
            answer = post_json(server.url + "/generate", body)
            served = torch.tensor([entry[0] for entry in answer["meta_info"]["input_token_logprobs"][1:]])
            torch.testing.assert_close(served.double(), reference_logprobs(model, ids), atol=2e-5, rtol=0)
            with torch.no_grad():
                greedy = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False,
                                        eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
            assert answer["output_ids"][: len(greedy)] == greedy[: len(answer["output_ids"])]
            assert len(answer["output_ids"]) == 8 or answer["meta_info"]["finish_reason"]["type"] == "stop"
    finally:
        server.stop()
