"""The released IF pool, byte for byte, through the trainer's own loading path: every row loads, none is lost."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest

from dnmopd.data.chat import PromptTokenizer
from dnmopd.data.loading import load_prompts
from dnmopd.data.manifest import Manifest, file_problem
from dnmopd.data.prompts import PromptSet
from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

ROOT = Path(__file__).resolve().parents[2]
RELEASE_COPY = ROOT / "tests" / "fixtures" / "data" / "release" / "teacher" / "if_train.jsonl.xz"
REL = "teacher/if_train.jsonl"


@pytest.fixture(scope="module")
def release_file(tmp_path_factory) -> Path:
    """The released file, decompressed under its release path, checked against the pinned size and sha256."""
    path = tmp_path_factory.mktemp("release") / REL
    path.parent.mkdir(parents=True)
    path.write_bytes(lzma.decompress(RELEASE_COPY.read_bytes()))
    assert file_problem(path, Manifest.load(ROOT / "data" / "MANIFEST.json").files[REL]) is None
    return path


def test_every_released_row_loads_through_datasets_unchanged(release_file, tmp_path):
    dataset, report = load_prompts(release_file, cache_dir=tmp_path)
    assert (report.rows, report.skipped, dict(report.domains)) == (8000, 0, {"ifeval": 8000})
    raw = [json.loads(line) for line in release_file.read_text(encoding="utf-8").splitlines()]
    assert [dict(row) for row in dataset] == raw
    assert sum('"forbidden_chars", "values"' in row["label"] for row in raw) == 790


@pytest.mark.slow
def test_every_released_row_becomes_a_prompt_of_the_trainer(release_file, tmp_path):
    tokenizer = PromptTokenizer.from_pretrained(build_tiny_tokenizer(tmp_path / "tokenizer"))
    prompts = PromptSet.load(release_file, tokenizer, domains=["ifeval"], max_prompt_tokens=100_000,
                             model_vocab=len(tokenizer.tokenizer))
    raw = [json.loads(line) for line in release_file.read_text(encoding="utf-8").splitlines()]
    assert len(prompts) == 8000
    assert [(p.domain, p.label) for p in prompts.prompts] == [("ifeval", row["label"]) for row in raw]
    first = prompts[0]
    assert tokenizer.tokenizer.decode(first.prompt_ids).count(raw[0]["prompt"]) == 1
