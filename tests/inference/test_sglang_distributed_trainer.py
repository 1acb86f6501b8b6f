"""The trainer with `rollout.sync: distributed` against a real SGLang server (CPU, gloo): data parallel 2, and
pipeline parallel 2.

`rollout.sender_dp_rank: 1` makes global rank 1 the sender: it forms the weight-update group as the group's
rank 0 (SGLang's fixed broadcast source) and broadcasts the weights after each of 3 updates; every update is
probed. Each update's rollouts come from the weights the previous sync served, so the trainer's log-probs of them
equal SGLang's (the rollout log-prob difference); the final served weights equal the run's release. At pipeline
parallel 2 the second stage's layers reach the sending leader over the trainer's pipeline group as it streams.

The same run with `sync: disk` must log the same metrics. SGLang's sampling is not seeded on the CPU (only
`--enable-deterministic-inference` seeds it, and that refuses the CPU attention backend), so this pair of runs
uses a student whose every next-token distribution puts all but ~2e-6 of its mass on one token: its rollouts
are the same in both runs, and it still trains (Adam steps every parameter with a gradient). The metrics then
agree to 1e-6 relative: SGLang's log-prob of that token (~-2e-6) moves in its 8th digit with the batch it was
computed in, and the DN statistics carry it.
"""

import json
import math
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import torch
from sglang_servers import SGLangServer
from tiny_checkpoints import VOCAB, reference_logprobs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]  # a server start and four trainer runs

REPO = Path(__file__).resolve().parents[2]
DOMAINS = ("math", "code", "ifeval")
PEAK_TOKEN = 300
PEAK_GAP = 20.0
"""Nats between the peaked student's favourite token and every other (the rest of its mass: ~1023 e^-20)."""
WALL_CLOCK = ("time", "timeline/", "throughput/")
"""Metrics of wall-clock time (and teachers' `latency_s`), which no two runs share."""


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Untied tiny Qwen3 students (a random one, and a peaked one), three tiny teachers, one tokenizer."""
    from safetensors.torch import load_file, save_file

    from dnmopd.examples.tiny import build_tiny_hf_checkpoint
    from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

    root = tmp_path_factory.mktemp("distributed-sync-models")
    tokenizer = build_tiny_tokenizer(root / "tokenizer", flavor="qwen3", vocab_size=VOCAB)

    def build(name, seed, tied):
        return build_tiny_hf_checkpoint(root / name, arch="qwen3", vocab_size=VOCAB, seed=seed, num_layers=2,
                                        tie_word_embeddings=tied, tokenizer_dir=tokenizer)

    build("student", 0, tied=False)
    for seed, domain in enumerate(DOMAINS, start=1):
        build(f"{domain}_teacher", seed, tied=True)
    peaked = build("peaked", 0, tied=False)
    weights = load_file(str(peaked / "model.safetensors"))
    hidden = weights["model.embed_tokens.weight"].shape[1]
    weights["model.embed_tokens.weight"][:, 0] += 100.0  # the residual stream points along dimension 0 ...
    weights["lm_head.weight"][:, 0] = 0.0  # ... which, after the final norm (~sqrt(hidden) there), only one
    weights["lm_head.weight"][PEAK_TOKEN, 0] = PEAK_GAP / math.sqrt(hidden) / float(weights["model.norm.weight"][0])
    save_file(weights, str(peaked / "model.safetensors"), metadata={"format": "pt"})  # output row reads
    return root


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    server = SGLangServer(models / "student", tmp_path_factory.mktemp("sglang-logs"), context_length=2048)
    try:
        yield server.start()
    finally:
        server.stop()


def call(url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.loads(answer.read())


def serve(server, folder):
    """Start a run from `folder`'s weights (as a fresh server would serve them)."""
    assert call(server.url + "/update_weights_from_disk", {"model_path": str(folder)})["success"]


def train(models, student, run_dir, server, sync, extra=()):
    """A 3-update run on 2 processes under torchrun (data parallel 2, rank 1 sending the weights, unless `extra`
    overrides say otherwise); returns its metrics and the stderr of each rank."""
    teachers = ", ".join(f"{{backend: inprocess, name: {d}_teacher, model_path: {models / f'{d}_teacher'}}}"
                         for d in DOMAINS)
    engine = (f"{{backend: sglang, model_path: {student}, update_dir: {run_dir / 'updates'}, "
              f"pool: {{urls: [{server.url}]}}}}")
    overrides = [f"run.output_dir={run_dir}", "run.name=run", f"student.hf_path={student}", f"rollout.engine={engine}",
                 "rollout.sampling.seed=null", f"teachers.models=[{teachers}]", "train.updates=3",
                 "data.sampler.prompts_per_rollout=4", "data.samples_per_prompt=2", "data.max_prompt_tokens=1024",
                 "rollout.sampling.max_new_tokens=8", "checkpoint.export_hf=true", "logging.progress=false",
                 "logging.report=false", "logging.metrics.tensorboard=false", "logging.probe_every=0",
                 "optimizer.lr=1e-3", "optimizer.lr_warmup_updates=0", f"rollout.sync={sync}",
                 "rollout.sender_dp_rank=1", "rollout.distributed.backend=gloo", *extra]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "--log-dir", str(run_dir / "logs"), "--redirects", "3",
               str(REPO / "launch" / "pretrain_dnmopd.py"), "--config", str(REPO / "configs" / "demo_cpu.yaml"),
               *[part for override in overrides for part in ("--set", override)]]
    done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=900)
    logs = {rank: next((run_dir / "logs").glob(f"*/attempt_0/{rank}/stderr.log")).read_text() for rank in (0, 1)}
    assert done.returncode == 0, "\n".join(text[-3000:] for text in logs.values())
    records = [json.loads(line) for line in (run_dir / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    return records, logs


def test_a_dp2_run_broadcasts_from_rank_1_and_serves_the_trainers_weights_after_every_update(
        models, server, tmp_path):
    from transformers import AutoModelForCausalLM

    serve(server, models / "student")
    records, logs = train(models, models / "student", tmp_path, server, "distributed")
    assert "weight-update group" in logs[1] and "weight-update group" not in logs[0]  # rank 1 formed it
    for record in records:  # each batch came from the weights the previous sync served: the trainer's own
        assert record["train_rollout_logprob_abs_diff"] < 1e-4, record
    info = call(server.url + "/get_model_info")
    assert info["weight_version"] == "step-3" and info["model_path"] == str(models / "student")
    assert not (tmp_path / "updates").exists()  # nothing went through the disk

    release = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "release", dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(3)
    for length in (12, 40):  # the weights served after update 3 are the ones the run released
        ids = torch.randint(3, 990, (length,), generator=generator).tolist()
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 0, "temperature": 0}, "return_logprob": True,
                "logprob_start_len": 0}
        served = [entry[0] for entry in call(server.url + "/generate", body)["meta_info"]["input_token_logprobs"][1:]]
        torch.testing.assert_close(torch.tensor(served, dtype=torch.float64), reference_logprobs(release, ids),
                                   atol=2e-5, rtol=0)


def test_the_same_run_with_sync_disk_logs_the_same_metrics(models, server, tmp_path):
    runs = {}
    for sync in ("distributed", "disk"):
        serve(server, models / "peaked")
        runs[sync], _ = train(models, models / "peaked", tmp_path / sync, server, sync)
    assert (tmp_path / "disk" / "updates" / "step-3").is_dir()  # the disk run wrote its last update folder
    for broadcast, disk in zip(runs["distributed"], runs["disk"], strict=True):
        assert broadcast.keys() == disk.keys()
        compared = sorted(key for key in disk if not key.startswith(WALL_CLOCK) and not key.endswith("latency_s"))
        assert len(compared) > 30
        assert [broadcast[key] for key in compared] == pytest.approx([disk[key] for key in compared], rel=1e-6,
                                                                      abs=1e-9), compared
    assert runs["disk"][-1]["grad_norm"] > 0 and runs["disk"][0]["loss"] != runs["disk"][-1]["loss"]  # it trains


def test_a_pipeline_parallel_student_streams_both_stages_into_the_broadcast(models, server, tmp_path):
    """PP 2 (data parallel 1): the leader sends while the other stage's layers reach it over the pipeline group."""
    serve(server, models / "student")
    records, logs = train(models, models / "student", tmp_path, server, "distributed",
                          extra=["parallel.pipeline=2", "rollout.sender_dp_rank=0"])
    assert "weight-update group" in logs[0] and "weight-update group" not in logs[1]
    for record in records:
        assert record["train_rollout_logprob_abs_diff"] < 1e-4, record
    assert call(server.url + "/get_model_info")["weight_version"] == "step-3"
