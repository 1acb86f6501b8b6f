"""launch/convert_to_hf.py end to end: HF -> training checkpoint -> release folder, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from distributed import run_workers
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from student_fixtures import tiny_models  # noqa: F401
from student_helpers import build_test_tokenizer, hf_logits, probe_ids

SCRIPT = Path(__file__).parents[2] / "launch" / "convert_to_hf.py"


def _convert(*args) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=600, env=env)


def _release_tensors(folder: Path) -> dict[str, torch.Tensor]:
    index = folder / "model.safetensors.index.json"
    files = ["model.safetensors"]
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    tensors = {}
    for file in files:
        tensors.update(load_file(folder / file))
    return tensors


@pytest.fixture(scope="module")
def vl_checkpoint(tiny_models, tmp_path_factory):  # noqa: F811
    """Training checkpoint made from the tiny Qwen3.5 VL model by the reverse direction of the converter."""
    ckpt = tmp_path_factory.mktemp("convert") / "ckpt"
    proc = _convert("--from-hf", tiny_models["qwen3_5_vl"], "--output", ckpt)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return ckpt


def test_release_reloads_with_transformers_and_keeps_every_tensor(tiny_models, vl_checkpoint, tmp_path):  # noqa: F811
    source = tiny_models["qwen3_5_vl"]
    tokenizer = build_test_tokenizer(tmp_path / "tokenizer")
    (tmp_path / "metrics.json").write_text(json.dumps({"math/accuracy": 0.5, "updates": 80}))
    (tmp_path / "run.yaml").write_text("method: dn_mopd\nlr: 1.0e-6\n")
    release = tmp_path / "release"
    proc = _convert(
        "--checkpoint", vl_checkpoint, "--output", release, "--tokenizer", tokenizer, "--metrics",
        tmp_path / "metrics.json", "--training-config", tmp_path / "run.yaml", "--max-shard-size", "64KiB",
        "--base-model-id", "Qwen/Qwen3.5-2B", "--license", "apache-2.0", "--name", "tiny-vl-student",
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "verification: max |logit difference|" in proc.stdout

    names = {p.name for p in release.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors.index.json", "README.md",
            "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} <= names
    assert sum(n.endswith(".safetensors") for n in names) > 1  # 64 KiB shards
    assert json.loads((release / "config.json").read_text()) == json.loads((Path(source) / "config.json").read_text())
    card = ModelCard.load(release / "README.md")
    assert card.data.to_dict() == {"base_model": "Qwen/Qwen3.5-2B", "base_model_relation": "finetune",
                                   "license": "apache-2.0", "library_name": "transformers",
                                   "pipeline_tag": "image-text-to-text", "tags": ["dnmopd"]}
    assert card.text.lstrip().startswith("# tiny-vl-student\n")
    assert f"Exported from the training checkpoint {vl_checkpoint.name}." in card.text
    assert "vision tower and the multi-token-prediction head are the base model's, unchanged" in card.text
    assert "| math/accuracy | 0.5 |" in card.text and "method: dn_mopd" in card.text
    assert not list(tmp_path.glob(".release.tmp*"))

    original = load_file(Path(source) / "model.safetensors")
    exported = _release_tensors(release)
    assert sorted(exported) == sorted(original)  # LM + vision tower + MTP head
    assert [n for n in original if not torch.equal(original[n], exported[n])] == []

    ids = probe_ids()
    assert torch.equal(hf_logits(str(release), ids), hf_logits(source, ids))
    from transformers import Qwen3_5ForConditionalGeneration

    _, info = Qwen3_5ForConditionalGeneration.from_pretrained(release, output_loading_info=True)
    assert not info["missing_keys"]  # loads as the original vision-language architecture


def test_failed_verification_leaves_no_folder(vl_checkpoint, tmp_path):
    tokenizer = build_test_tokenizer(tmp_path / "tokenizer")
    release = tmp_path / "release"
    proc = _convert("--checkpoint", vl_checkpoint, "--output", release, "--tokenizer", tokenizer, "--tolerance", "-1")
    assert proc.returncode != 0 and "release verification failed" in proc.stderr
    assert not release.exists() and not list(tmp_path.glob(".release.tmp*"))


def test_a_local_path_as_base_model_id_is_refused(vl_checkpoint, tmp_path):
    proc = _convert("--checkpoint", vl_checkpoint, "--output", tmp_path / "release", "--base-model-id", tmp_path)
    assert proc.returncode != 0 and f"base_model: '{tmp_path}' is a local path" in proc.stderr
    assert not (tmp_path / "release").exists()


def test_missing_tokenizer_is_a_clear_error(vl_checkpoint, tmp_path):
    proc = _convert("--checkpoint", vl_checkpoint, "--output", tmp_path / "release")
    assert proc.returncode != 0 and "no tokenizer files" in proc.stderr
    assert not (tmp_path / "release").exists()


def _pipeline_release_worker(rank, world, checkpoint, output, tokenizer):
    from dnmopd.hf.release import write_release
    from dnmopd.student import ParallelDims, Student, init_distributed

    init_distributed()
    dims = ParallelDims.Config(pipeline=2).build()
    write_release(Student.from_checkpoint(checkpoint, dims), output, tokenizer=tokenizer, log=lambda *_: None)
    dims.destroy()


def test_release_from_two_pipeline_stages(tiny_models, vl_checkpoint, tmp_path):  # noqa: F811
    tokenizer = build_test_tokenizer(tmp_path / "tokenizer")
    run_workers(2, _pipeline_release_worker, str(vl_checkpoint), str(tmp_path / "release"), tokenizer)
    original = load_file(Path(tiny_models["qwen3_5_vl"]) / "model.safetensors")
    exported = _release_tensors(tmp_path / "release")
    assert sorted(exported) == sorted(original)
    assert [n for n in original if not torch.equal(original[n], exported[n])] == []
