"""`launch/evaluate.py run` on the demo's student with the in-process engine: records, table, resume rules."""

import json
from dataclasses import replace

import pytest

from dnmopd.data.chat import PromptTokenizer
from dnmopd.eval.generate import ResumeError, RunSpec, generate
from dnmopd.eval.protocol import SUITES
from dnmopd.examples.demo_models import build_demo_models
from dnmopd.rollout.inprocess import InProcessRollout


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    return build_demo_models(tmp_path_factory.mktemp("demo-models")) / "student"


@pytest.fixture(scope="module")
def evaluated(student, sample_data, tmp_path_factory):
    from launch_evaluate import main

    out = tmp_path_factory.mktemp("eval-out")
    args = ["run", "--model", str(student), "--data-dir", str(sample_data), "--output-dir", str(out),
            "--limit", "2", "--n", "2", "--max-tokens", "16", "--no-progress"]
    assert main([*args, "--suites", ",".join(SUITES)]) == 0
    return out, args


def test_every_suite_writes_records_and_a_summary(evaluated):
    out, _ = evaluated
    for suite in SUITES:
        folder = out / "student" / suite / "cap16"
        records = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]
        assert len(records) == 2
        for record in records:
            extra = {"ifeval": ["loose"], "ifbench": ["loose"], "aime25": ["consensus"], "aime26": ["consensus"],
                     "math500": ["consensus"]}.get(suite, [])
            assert list(record) == ["id", "input_sha256", "n", "correct", "mean_tokens", "cap_hits", *extra, "errors"]
            assert record["errors"] == []
            assert record["n"] == 2 and set(record["correct"]) <= {"0", "1"} and len(record["correct"]) == 2
            assert 0 < record["mean_tokens"] <= 16 and 0 <= record["cap_hits"] <= 2
        raw = json.loads((folder / "raw" / "0000.json").read_text())
        assert [r["id"] for r in raw] == [r["id"] for r in records]
        assert record["cap_hits"] == sum(reason == "length" for reason in raw[-1]["finish_reasons"])
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["questions"] == 2 and summary["deviations"] and summary["eval_failures"] == 0
        assert ("score_loose" in summary) == (suite in ("ifeval", "ifbench"))
        assert ("cons_at_n" in summary) == ("pass_at_k" in summary) == (suite in ("aime25", "aime26", "math500"))
    model = json.loads((out / "student" / "summary_cap16.json").read_text())
    assert model["levels"]["total"] is not None and model["levels"]["math500"] is not None
    assert (out / "suites_cap16.png").stat().st_size > 0


def test_the_table_is_printed(student, sample_data, tmp_path, capsys):
    from launch_evaluate import main

    assert main(["run", "--model", str(student), "--data-dir", str(sample_data), "--output-dir", str(tmp_path),
                 "--suites", "ifbench", "--limit", "3", "--n", "2", "--max-tokens", "8", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "IFBench" in out and "student" in out and "not the paper's protocol" in out
    assert "beside avg@n" in out and "loose" in out


def test_a_trainer_release_is_named_after_its_run(tmp_path):
    from dnmopd.eval.runner import default_name

    assert default_name(tmp_path / "dn_mopd_9b" / "release") == "dn_mopd_9b"
    assert default_name(tmp_path / "models" / "Qwen3.5-4B") == "Qwen3.5-4B"


def test_a_dead_server_fails_in_seconds_naming_its_url(student, sample_data, tmp_path):
    """The start-up health check runs before anything is planned (the pool would retry for minutes)."""
    import time

    from launch_evaluate import main

    started = time.monotonic()
    with pytest.raises(SystemExit, match="http://127.0.0.1:9 failed its check"):
        main(["run", "--model", str(student), "--data-dir", str(sample_data), "--output-dir", str(tmp_path),
              "--suites", "ifbench", "--limit", "1", "--n", "1", "--max-tokens", "4", "--no-progress",
              "--set", "engine.backend=sglang", "--set", f"engine.model_path={student}",
              "--set", "engine.pool.urls=[http://127.0.0.1:9]", "--set", f"engine.update_dir={tmp_path / 'u'}"])
    assert time.monotonic() - started < 30
    assert not (tmp_path / "student").exists()


def test_resume_reuses_chunks_and_grades(evaluated, student, sample_data):
    from launch_evaluate import main

    out, args = evaluated
    folder = out / "student" / "ifbench" / "cap16"
    before = {p.name: p.stat().st_mtime_ns for p in (folder / "raw").iterdir()}
    grades = (folder / "grades" / "0000.json").stat().st_mtime_ns
    assert main([*args, "--suites", "ifbench"]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in (folder / "raw").iterdir()} == before
    assert (folder / "grades" / "0000.json").stat().st_mtime_ns == grades


def test_a_mixed_protocol_resume_is_refused(evaluated, student, sample_data):
    from dnmopd.eval.catalog import load_catalog

    out, _ = evaluated
    folder = out / "student" / "ifbench" / "cap16"
    catalog = load_catalog("ifbench", sample_data)
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    spec = RunSpec(name="student", model=str(student), suite="ifbench", cap=16, n=2, questions=2,
                   catalog_sha256=catalog.sha256, engine="inprocess", deviations=tuple(manifest["deviations"]))
    tokenizer = PromptTokenizer.from_pretrained(student)
    engine = InProcessRollout(InProcessRollout.Config(model_path=str(student)))
    generate(engine, tokenizer, catalog.rows[:2], spec, folder)  # the same run: accepted, nothing generated
    for changed in (replace(spec, cap=32), replace(spec, n=3), replace(spec, catalog_sha256="0" * 64)):
        with pytest.raises(ResumeError, match="mixed-protocol resume"):
            generate(engine, tokenizer, catalog.rows[:2], changed, folder)


def test_answers_do_not_depend_on_batching(evaluated, student, sample_data, tmp_path):
    """Answer j of question q is seeded by its position (42 + q n + j), not by what shares its batch."""
    from dnmopd.eval.catalog import load_catalog

    out, _ = evaluated
    catalog = load_catalog("aime25", sample_data)
    manifest = json.loads((out / "student" / "aime25" / "cap16" / "MANIFEST.json").read_text())
    tokenizer = PromptTokenizer.from_pretrained(student)
    engine = InProcessRollout(InProcessRollout.Config(model_path=str(student), max_batch_size=1))
    spec = RunSpec(name="student", model=str(student), suite="aime25", cap=16, n=2, questions=2,
                   catalog_sha256=catalog.sha256, engine="inprocess", deviations=tuple(manifest["deviations"]))
    [chunk] = generate(engine, tokenizer, catalog.rows[:2], spec, tmp_path)
    batched = json.loads((out / "student" / "aime25" / "cap16" / "raw" / "0000.json").read_text())
    assert [r["responses"] for r in json.loads(chunk.read_text())] == [r["responses"] for r in batched]
