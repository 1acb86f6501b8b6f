"""The fixed probe set (logging.probe): its exact full-vocabulary KL against a float64 transformers reference on
the students' and teachers' Hugging Face folders, the same probe at every update and after a resume, and the
options' errors."""

import json
import os
import subprocess
import sys

import pytest
import torch
from distributed import free_port
from run_helpers import DEMO, REPO, read_metrics, tiny_overrides

from dnmopd.config import load_config
from dnmopd.data.chat import PromptTokenizer
from dnmopd.data.prompts import PromptSet
from dnmopd.trainer.config import TrainerConfig
from dnmopd.trainer.measurements.probe import PROBE_FILE, ProbeConfig, read_probe, split_prompts

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
DOMAINS = ("math", "code", "ifeval")
PROBE = ["logging.probe_every=1", "logging.probe.prompts_per_domain=2",
         "logging.probe.prompt_files=[samples:teacher/math_train.jsonl, samples:teacher/code_train.jsonl, "
         "samples:teacher/if_train.jsonl]", "data.sampler.prompts_per_rollout=4",
         "optimizer.lr_decay_style=constant"]  # a resumed run with more updates keeps its learning rate


def run(models, run_dir, *, updates, extra=()):
    overrides = [*tiny_overrides(models, run_dir, updates=updates), *PROBE, *extra]
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                    str(free_port()), str(REPO / "launch" / "pretrain_dnmopd.py"), "--config", str(DEMO),
                    *[arg for o in overrides for arg in ("--set", o)]], env=ENV, check=True, capture_output=True,
                   timeout=900)
    return run_dir / "run"


def reference_kl(student_path, models, rows) -> dict[str, float]:
    """Token means per domain (and all) of KL(student || routed teacher) in float64 with transformers."""
    from transformers import AutoModelForCausalLM

    def load(path):
        return AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float64).eval()

    student = load(student_path)
    teachers = {}
    totals = {d: [0.0, 0] for d in (*DOMAINS, "all")}
    with torch.no_grad():
        for row in rows:
            teacher = teachers.setdefault(row["target"], load(models / row["target"]))
            ids = torch.tensor([row["prompt_ids"] + row["response_ids"]])
            positions = slice(len(row["prompt_ids"]) - 1, ids.shape[1] - 1)
            q = torch.log_softmax(student(ids).logits[0, positions], -1)
            p = torch.log_softmax(teacher(ids).logits[0, positions], -1)
            kl = (q.exp() * (q - p)).sum(-1)
            for key in (row["domain"], "all"):
                totals[key][0] += float(kl.sum())
                totals[key][1] += kl.numel()
    return {d: total / count for d, (total, count) in totals.items()}


def probe_values(record) -> dict[str, float]:
    return {key.removeprefix("probe_kl/"): value for key, value in record.items() if key.startswith("probe_kl/")}


@pytest.mark.slow
def test_probe_kl_matches_float64_transformers_and_stays_fixed(demo_models, tmp_path):
    # lr 1e-30: Adam's steps vanish below float32's resolution, so the student never changes
    run_dir = run(demo_models, tmp_path, updates=2, extra=["optimizer.lr=1e-30"])
    records = read_metrics(tmp_path)
    probe = json.loads((run_dir / PROBE_FILE).read_text())
    assert len(probe["rows"]) == 2 * 2 * len(DOMAINS)
    assert [r["target"] for r in probe["rows"]] == [f"{d}_teacher" for d in DOMAINS for _ in range(4)]
    expected = reference_kl(demo_models / "student", demo_models, probe["rows"])
    for record in records:
        assert set(probe_values(record)) == {*DOMAINS, "all"}
        for key, value in probe_values(record).items():
            assert value == pytest.approx(expected[key], rel=1e-4, abs=1e-6), key
    # the same probe, the same student: equal up to float32 rounding, since MKL's CPU GEMMs sum in an order that
    # depends on the buffers' alignment (bit-equal under MKL_CBWR=COMPATIBLE; 1.4e-7 apart without, on some CPUs)
    assert probe_values(records[1]) == pytest.approx(probe_values(records[0]), rel=1e-6, abs=0)


@pytest.mark.slow
def test_resumed_run_measures_the_stored_probe(demo_models, tmp_path):
    first = run(demo_models, tmp_path, updates=2, extra=["checkpoint.save_every=1"])
    stored = (first / PROBE_FILE).read_bytes()
    before = read_metrics(tmp_path)
    resumed = run(demo_models, tmp_path, updates=3, extra=["checkpoint.save_every=1", "checkpoint.export_hf=true",
                                                          "checkpoint.allow_changes=[train.updates]"])
    assert (resumed / PROBE_FILE).read_bytes() == stored
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [0, 1, 2]
    assert [probe_values(r) for r in records[:2]] == [probe_values(r) for r in before]
    expected = reference_kl(resumed / "release", demo_models, json.loads(stored)["rows"])
    for key, value in probe_values(records[2]).items():  # measured after the last update: the released weights
        assert value == pytest.approx(expected[key], rel=1e-4, abs=1e-6), key
    assert probe_values(records[2]) != probe_values(records[1])


def demo_config(models, tmp_path, *extra):
    overrides = [*tiny_overrides(models, tmp_path, updates=2), *PROBE, *extra]
    return load_config(TrainerConfig, [DEMO], overrides)


def test_probe_refuses_server_teachers(demo_models, tmp_path):
    teachers = ("teachers.models=[{backend: sglang, name: math_teacher, pool: {urls: ['http://127.0.0.1:1']}, "
                "model_path: x}]")
    with pytest.raises(ValueError, match=r"logging\.probe_every.*in-process teachers.*math_teacher"):
        demo_config(demo_models, tmp_path, teachers, "method.routing.teachers=[math_teacher]",
                    "method.routing.label_map={default: math_teacher}", "method.loss.kind=sampled_token")
    with pytest.raises(ValueError, match=r"logging\.probe_every.*must be >= 0"):
        demo_config(demo_models, tmp_path, "logging.probe_every=-1")
    with pytest.raises(ValueError, match=r"prompts_per_domain must be >= 1"):
        ProbeConfig(prompts_per_domain=0)


def test_held_out_split_and_prompt_files(demo_models):
    from dnmopd.data.sample_data import sample_file

    tokenizer = PromptTokenizer.from_pretrained(demo_models / "student")

    def load(name):
        return PromptSet.load(sample_file(name), tokenizer, domains=list(DOMAINS), max_prompt_tokens=1024,
                              model_vocab=1024)

    train = load("student/train_3domain.jsonl")
    probe, kept = split_prompts(ProbeConfig(prompts_per_domain=3), train, list(DOMAINS), load)
    assert [p.domain for p in probe] == [d for d in DOMAINS for _ in range(3)]
    assert len(kept) == len(train) - 9 and not {p.prompt_ids for p in probe} & {p.prompt_ids for p in kept.prompts}
    assert [p.index for p in probe if p.domain == "math"] == [p.index for p in train.prompts if p.domain == "math"][:3]

    files = ProbeConfig(prompt_files=["teacher/math_train.jsonl"], prompts_per_domain=2)
    probe, kept = split_prompts(files, train, ["math"], load)
    assert kept is train and len(probe) == 2
    assert not {p.prompt_ids for p in probe} & {p.prompt_ids for p in train.prompts}
    with pytest.raises(ValueError, match=r"teacher/math_train.jsonl.*0 code prompts.*prompts_per_domain=2"):
        split_prompts(files, train, ["math", "code"], load)


def test_stored_probe_must_match_the_options(tmp_path):
    spec = ProbeConfig().spec(32, 1.0)
    path = tmp_path / PROBE_FILE
    row = {"domain": "math", "row": 0, "target": "math_teacher", "prompt_ids": [1, 2], "response_ids": [3]}
    path.write_text(json.dumps({"spec": {**spec, "prompts_per_domain": 4}, "rows": [row]}))
    with pytest.raises(ValueError, match=r"probe\.json.*prompts_per_domain=4.*prompts_per_domain=8"):
        read_probe(path, spec, ["math"], ["math_teacher"], 1024)
    path.write_text(json.dumps({"spec": spec, "rows": [{**row, "response_ids": [5000]}]}))
    with pytest.raises(ValueError, match=r"probe\.json: row 0.*\[0, 1024\)"):
        read_probe(path, spec, ["math"], ["math_teacher"], 1024)
    path.write_text(json.dumps({"spec": spec, "rows": [{**row, "target": "code_teacher"}]}))
    with pytest.raises(ValueError, match=r"probe\.json: row 0 .*a target outside \['math_teacher'\]"):
        read_probe(path, spec, ["math"], ["math_teacher"], 1024)
    path.write_text("{")
    with pytest.raises(ValueError, match=r"probe\.json: not a probe set"):
        read_probe(path, spec, ["math"], ["math_teacher"], 1024)
    path.write_text(json.dumps({"spec": spec, "rows": [row]}))
    assert read_probe(path, spec, ["math"], ["math_teacher"], 1024)["rows"] == [row]


def test_report_draws_the_probe_and_compares_runs(tmp_path):
    from dnmopd.trainer.measurements.report import draw_comparison, draw_report

    runs = []
    for name, math_w in (("dn", 2.0), ("label", 1.0)):
        run_dir = tmp_path / name
        run_dir.mkdir()
        records = [{"step": s, "probe_kl/math": 0.02 - 0.001 * s, "probe_kl/all": 0.1, "dn/math/applied": math_w}
                   for s in range(3)]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        runs.append(run_dir)
    assert (runs[0] / "plots" / "probe_kl.png") in draw_report(runs[0])
    figure = draw_comparison(runs, tmp_path / "out" / "dn-vs-label.png")
    assert figure.stat().st_size > 0
    (runs[1] / "metrics.jsonl").write_text(json.dumps({"step": 0, "loss": 1.0}) + "\n")
    with pytest.raises(ValueError, match=r"none of .* logged probe_kl"):
        draw_comparison([runs[1]], tmp_path / "none.png")
    with pytest.raises(FileNotFoundError, match=r"missing/metrics.jsonl not found"):
        draw_comparison([tmp_path / "missing"], tmp_path / "none.png")
