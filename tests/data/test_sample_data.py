"""The sample data: release schema, loadable offline by ``datasets``, built as documented, labels right."""

from __future__ import annotations

import json
import lzma
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from dnmopd.data.loading import load_prompts
from dnmopd.data.manifest import RELEASE_LAYOUT, Manifest, file_problem
from dnmopd.verifiers import ifeval
from dnmopd.verifiers.math import grade

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"
SOLUTIONS = json.loads((ROOT / "tests" / "fixtures" / "data" / "code_solutions.json").read_text())
RELEASE_COPY = ROOT / "tests" / "fixtures" / "data" / "release" / "teacher" / "if_train.jsonl.xz"


def rows(rel: str) -> list[dict]:
    return [json.loads(line) for line in (SAMPLES / rel).read_text().splitlines()]


def key(row: dict) -> str:
    return f"{row['metadata']['data_source']}:{row['metadata']['src_index']}"


@pytest.mark.parametrize("rel", list(RELEASE_LAYOUT))
def test_every_sample_file_loads_offline_through_datasets(rel, tmp_path):
    assert os.environ.get("HF_DATASETS_OFFLINE") == "1"
    dataset, report = load_prompts(SAMPLES / rel, cache_dir=tmp_path)
    entry = Manifest.load(SAMPLES / "MANIFEST.json").files[rel]
    assert file_problem(SAMPLES / rel, entry) is None
    loaded = list(dataset)
    assert len(loaded) == report.rows == entry.rows and dict(report.domains) == entry.domains
    assert list(loaded[0]) == ["prompt", "label", "domain", "teacher", "metadata"]
    assert loaded == rows(rel)  # nothing changed on the way through Arrow
    if rel == "teacher/code_train.jsonl":
        assert type(dataset).__name__ == "IterableDataset"  # the code pool streams


def test_student_set_has_16_rows_per_domain_and_teacher_pools_a_few_dozen():
    student = rows("student/train_3domain.jsonl")
    assert sorted(r["domain"] for r in student) == ["code"] * 16 + ["ifeval"] * 16 + ["math"] * 16
    assert [len(rows(rel)) for rel in list(RELEASE_LAYOUT)[1:]] == [32, 24, 40]


def test_student_set_is_built_from_the_teacher_pools_as_documented():
    student = rows("student/train_3domain.jsonl")
    for domain, rel in (("math", "teacher/math_train.jsonl"), ("code", "teacher/code_train.jsonl")):
        ours = sorted((r for r in student if r["domain"] == domain), key=lambda r: r["metadata"]["src_index"])
        assert rows(rel)[:16] == ours
    teacher_if = rows("teacher/if_train.jsonl")
    rng = random.Random(42)
    shuffled = list(teacher_if)
    rng.shuffle(shuffled)
    wrapped = [{**r, "prompt": [{"content": r["prompt"], "role": "user"}]} for r in shuffled[:16]]
    assert sorted(map(key, wrapped)) == sorted(key(r) for r in student if r["domain"] == "ifeval")
    math_code = sorted((r for r in student if r["domain"] == "math"), key=lambda r: r["metadata"]["src_index"]) + \
        sorted((r for r in student if r["domain"] == "code"), key=lambda r: r["metadata"]["src_index"])
    rebuilt = math_code + wrapped
    rng.shuffle(rebuilt)  # the same generator instance shuffles the whole list
    assert rebuilt == student


def test_if_rows_are_released_rows_covering_every_type_and_parameter_value():
    released = lzma.decompress(RELEASE_COPY.read_bytes()).decode().splitlines(keepends=True)
    lines = (SAMPLES / "teacher/if_train.jsonl").read_text().splitlines(keepends=True)
    indices = [json.loads(line)["metadata"]["src_index"] for line in lines]
    assert indices == sorted(set(indices)) and [released[i] for i in indices] == lines  # the release's own bytes

    def values(label):
        return {(c["type"], k, json.dumps(v)) for c in json.loads(label) for k, v in c.items()
                if k != "type" and c["type"] != "repeat_first"}

    every = set().union(*(values(json.loads(line)["label"]) for line in released))
    assert set().union(*(values(json.loads(line)["label"]) for line in lines)) >= {
        v for v in every if v[0] not in ("must_include", "must_exclude")}  # all types, n values, letters, texts
    assert len({c["type"] for line in lines for c in json.loads(json.loads(line)["label"])}) == 19
    assert {len(json.loads(json.loads(line)["label"])) for line in lines} == {1, 2, 3, 4}


def test_no_internal_paths_in_the_samples():
    for path in SAMPLES.rglob("*.json*"):
        text = path.read_text()
        assert not any(marker in text for marker in ("/work/", "/home/", "/tmp/", "/root/", "C:\\")), path


def test_rebuilding_the_samples_changes_nothing():
    result = subprocess.run([sys.executable, str(ROOT / "data" / "build" / "build_samples.py"), "--check"],
                            capture_output=True, text=True, cwd=ROOT / "data" / "build")
    assert result.returncode == 0, result.stdout + result.stderr


def test_math_labels_accept_their_own_boxed_answer():
    for row in rows("teacher/math_train.jsonl"):
        assert grade(f"so the answer is \\boxed{{{row['label']}}}", row["label"]), row["label"]
        assert not grade("so the answer is \\boxed{-123456}", row["label"])


def test_if_labels_are_never_met_by_an_empty_answer():
    for row in rows("teacher/if_train.jsonl"):
        assert not ifeval.score("", row["label"]).passed


_RUN_CALL = """
import json, sys
source, fn_name, args = json.loads(sys.stdin.read())
namespace = {}
exec(source, namespace)
target = getattr(namespace["Solution"](), fn_name) if "Solution" in namespace else namespace[fn_name]
print(json.dumps(target(*args)))
"""


def run_solution(source: str, tests: dict, case: int) -> str:
    """The output of a reference solution on one test, run in a child Python process."""
    if "fn_name" in tests:
        payload = json.dumps([source, tests["fn_name"], tests["inputs"][case]])
        out = subprocess.run([sys.executable, "-c", _RUN_CALL], input=payload, capture_output=True, text=True,
                             timeout=30)
        return json.loads(out.stdout)
    out = subprocess.run([sys.executable, "-c", source], input=tests["inputs"][case], capture_output=True, text=True,
                         timeout=30)
    return out.stdout


def test_every_code_task_has_a_reference_solution_that_passes_its_tests():
    tasks = {key(r): json.loads(r["label"]) for r in rows("teacher/code_train.jsonl")}
    assert set(tasks) == set(SOLUTIONS)
    assert sum("fn_name" in t for t in tasks.values()) >= 1
    for name, tests in tasks.items():
        for case, expected in enumerate(tests["outputs"]):
            got = run_solution(SOLUTIONS[name], tests, case)
            if "fn_name" in tests:
                assert [got] == expected, (name, case)
            else:
                assert got.strip() == expected.strip(), (name, case, got)


def test_the_installed_package_ships_the_samples():
    if '"dnmopd/data/samples" = "data/samples"' not in (ROOT / "pyproject.toml").read_text():
        pytest.skip("pyproject.toml does not map dnmopd/data/samples yet (integration step in data/README.md)")
    from dnmopd.data.sample_data import sample_dir, sample_file

    rel = "student/train_3domain.jsonl"
    assert sample_file(rel).read_bytes() == (SAMPLES / rel).read_bytes()
    installed = {p.relative_to(sample_dir()): p.read_bytes() for p in sample_dir().rglob("*.json*")}
    assert installed == {p.relative_to(SAMPLES): p.read_bytes() for p in SAMPLES.rglob("*.json*")}
