"""The CPU demo's models: what each teacher knows, where, what DN makes of it, and that they build reproducibly."""

from __future__ import annotations

import json
import os

import pytest
import torch
from distributed import run_workers
from safetensors.torch import load_file

from dnmopd.core import DomainNormalizer
from dnmopd.data.chat import PromptTokenizer, row_messages
from dnmopd.data.sample_data import sample_file
from dnmopd.examples.demo_models import DOMAINS, LEAN, SUMMARY_CHANNEL, build_demo_models
from dnmopd.hf.models import load_causal_lm
from dnmopd.kernels import domain_stats
from dnmopd.rollout.base import RolloutRequest, SamplingParams
from dnmopd.rollout.inprocess import InProcessRollout
from dnmopd.trainer.step.batch import TrainBatch

NAMES = ("student", *(f"{d}_teacher" for d in DOMAINS))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return build_demo_models(tmp_path_factory.mktemp("demo-models"))


@pytest.fixture(scope="module")
def hf(models):
    return {name: load_causal_lm(str(models / name), device="cpu", dtype="float32", attn_implementation="sdpa")
            for name in NAMES}


@pytest.fixture(scope="module")
def prompts(models):
    tokenizer = PromptTokenizer.from_pretrained(models / "student")
    rows = [json.loads(line) for line in sample_file("student/train_3domain.jsonl").read_text().splitlines()]
    return [(row["metadata"]["domain"], tokenizer.encode(row_messages(row))) for row in rows]


def test_a_teacher_is_the_student_but_for_its_head_reading_its_domain_summary(models):
    student = load_file(models / "student" / "model.safetensors")
    for domain in DOMAINS:
        teacher = load_file(models / f"{domain}_teacher" / "model.safetensors")
        assert teacher.keys() == student.keys()
        changed = [name for name in student if not torch.equal(student[name], teacher[name])]
        assert changed == ["lm_head.weight"]
        diff = (teacher["lm_head.weight"] - student["lm_head.weight"]).abs().sum(0)
        assert diff.nonzero().flatten().tolist() == [SUMMARY_CHANNEL[domain]]


def test_each_teacher_leans_on_its_own_domain_only(hf, prompts):
    """At the end of every sample prompt: the std of the teacher's logit shift over the vocabulary is about LEAN[d]
    on domain d's prompts and a small fraction of it elsewhere; the reverse KL grows from math to IF."""
    shift = {(d, e): [] for d in DOMAINS for e in DOMAINS}
    kl = {d: [] for d in DOMAINS}
    with torch.no_grad():
        for domain, ids in prompts:
            logits = {n: m(input_ids=torch.tensor([ids])).logits[0, -1].double() for n, m in hf.items()}
            for teacher in DOMAINS:
                shift[teacher, domain].append((logits[f"{teacher}_teacher"] - logits["student"]).std().item())
            student, routed = (torch.log_softmax(logits[n], -1) for n in ("student", f"{domain}_teacher"))
            kl[domain].append((student.exp() * (student - routed)).sum().item())
    mean = {key: sum(v) / len(v) for key, v in shift.items()}
    for teacher in DOMAINS:
        assert 0.75 * LEAN[teacher] < mean[teacher, teacher] < 1.25 * LEAN[teacher]
        for domain in DOMAINS:
            if domain != teacher:
                assert mean[teacher, domain] < 0.25 * LEAN[teacher], (teacher, domain, mean[teacher, domain])
    mean_kl = [sum(kl[d]) / len(kl[d]) for d in DOMAINS]
    assert 0 < mean_kl[0] < mean_kl[1] < mean_kl[2]


def test_dn_weights_math_up_and_ifeval_down_on_the_students_own_samples(models, hf, prompts):
    engine = InProcessRollout(InProcessRollout.Config(model_path=str(models / "student")), model=hf["student"])
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seed=3)
    rollouts = engine.generate_batch([RolloutRequest(ids, i) for i, (_, ids) in enumerate(prompts)], params)
    domains = [domain for domain, _ in prompts]
    batch = TrainBatch.from_rows([ids for _, ids in prompts], [r.response_ids for r in rollouts],
                                 [r.logprobs for r in rollouts], [r.logprobs for r in rollouts],
                                 [DOMAINS.index(d) for d in domains])
    teacher_logp = torch.zeros(batch.response_mask.shape)
    with torch.no_grad():
        for row, (domain, rollout) in enumerate(zip(domains, rollouts, strict=True)):
            ids = torch.tensor([rollout.prompt_ids + rollout.response_ids])
            logp = torch.log_softmax(hf[f"{domain}_teacher"](input_ids=ids).logits[0], -1)
            start = len(rollout.prompt_ids) - 1
            positions = torch.arange(start, start + len(rollout.response_ids))
            teacher_logp[row, : len(positions)] = logp[positions, torch.tensor(rollout.response_ids)]
    stats = domain_stats(teacher_logp - batch.rollout_logp, batch.response_mask, batch.domain_ids, 3)  # as the trainer
    weights, diagnostics = DomainNormalizer(DOMAINS, multipliers="dn").from_statistics(stats)
    sigma = [diagnostics.domains[d].std for d in DOMAINS]
    assert sigma[0] < sigma[1] < sigma[2], sigma
    assert weights[0] > 1 > weights[2], weights


@pytest.mark.slow
def test_the_build_is_reproducible_and_reused(models, tmp_path):
    marker = models / "complete.json"
    before = marker.stat().st_mtime_ns
    assert build_demo_models(models) == models and marker.stat().st_mtime_ns == before
    again = build_demo_models(tmp_path / "again")
    for name in NAMES:
        assert (again / name / "model.safetensors").read_bytes() == (models / name / "model.safetensors").read_bytes()


def _megatron_logits(rank, world, path, ids):
    from dnmopd.student import BuildOptions, ParallelDims, Student, init_distributed
    from dnmopd.student.logits import forward_logits

    init_distributed()
    dims = ParallelDims.Config().build()
    logits = forward_logits(Student.from_hf(path, dims, BuildOptions(dtype="float32")), torch.tensor([ids]))
    dims.destroy()
    return logits[..., :1024]


def test_the_megatron_student_computes_what_transformers_computes(models, hf, prompts):
    """The trainer trains megatron's copy of the student: the reserved channels and the uniform-attention head
    must mean the same there."""
    ids = prompts[0][1] + prompts[-1][1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    (logits,) = run_workers(1, _megatron_logits, str(models / "student"), ids)
    with torch.no_grad():
        reference = hf["student"](input_ids=torch.tensor([ids])).logits
    assert (logits - reference).abs().max().item() < 1e-3
