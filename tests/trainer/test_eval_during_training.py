"""`eval:` in the trainer: a tiny run on CPU (in-process rollout engine, shipped sample catalogs) evaluates after
its updates; the logged eval/* scores and the recorded answers are those launch/evaluate.py gets from the
checkpoint of the same update (same seed and settings), also with train.rollout_ahead 1."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from distributed import free_port
from run_helpers import DEMO, REPO, read_metrics, tiny_overrides

from dnmopd.config import load_config
from dnmopd.data.chat import PromptTokenizer
from dnmopd.data.prompts import PromptSet
from dnmopd.data.sample_data import sample_file
from dnmopd.eval.catalog import prepare
from dnmopd.eval.graders.math import MathGrader
from dnmopd.trainer.config import TrainerConfig
from dnmopd.trainer.entry import run
from dnmopd.verifiers import Verifiers

SUITES = ("ifbench", "aime25")
SETTINGS = ["--limit", "3", "--n", "2", "--max-tokens", "12"]


@pytest.fixture(scope="module")
def eval_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval-data")
    prepare([*SUITES, "math500"], root, samples=True, progress=lambda _: None)
    return root


def eval_overrides(eval_data, suites=SUITES) -> list[str]:
    return ["eval.every=1", f"eval.suites=[{', '.join(suites)}]", f"eval.data_dir={eval_data}", "eval.limit=3",
            "eval.n=2", "eval.max_tokens=12"]


def launch_evaluate(model, eval_data, out, name):
    spec = importlib.util.spec_from_file_location("launch_evaluate", REPO / "launch" / "evaluate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["run", "--model", str(model), "--data-dir", str(eval_data), "--output-dir", str(out),
                        "--name", name, "--suites", ",".join(SUITES), "--no-progress", *SETTINGS]) == 0
    return out / name


def raw_answers(folder):
    return [(row["id"], row["responses"], row["token_counts"]) for row in json.loads(
        (folder / "raw" / "0000.json").read_text())]


@pytest.fixture(scope="module")
def evaluated_run(demo_models, eval_data, tmp_path_factory):
    """Two overlapped updates, evaluated after each; math500's grader fails (it must not stop the run)."""
    root = tmp_path_factory.mktemp("eval-run")

    original = MathGrader.grade

    def grade(self, row, responses):
        if self.kind == "math500":
            raise RuntimeError("checker exploded")
        return original(self, row, responses)

    overrides = tiny_overrides(demo_models, root, updates=2) + eval_overrides(eval_data, (*SUITES, "math500")) + [
        "train.rollout_ahead=1", "method.loss.kind=sampled_token", "checkpoint.save_every=1",
        "checkpoint.keep_last=0", "checkpoint.export_hf=true", "logging.report=true",
        "logging.metrics.tensorboard=true", "eval.prompts=samples:student/train_3domain.jsonl"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MathGrader, "grade", grade)
        run(load_config(TrainerConfig, [DEMO], overrides))
    return root / "run", read_metrics(root)


@pytest.mark.slow
def test_eval_metrics_are_logged_after_each_update(evaluated_run):
    run_dir, records = evaluated_run
    assert [r["step"] for r in records] == [0, 1]
    heldout = (run_dir / "eval" / "1" / "heldout" / "records.jsonl").read_text().splitlines()
    domains = {json.loads(line)["domain"] for line in heldout}
    for record in records:
        names = {key for key in record if key.startswith("eval")}
        assert names == {"eval/ifbench", "eval/aime25", "eval/heldout", "eval_failures",
                         *(f"eval/heldout/{d}" for d in domains)}
        assert record["eval_failures"] == 1.0  # math500 left out, the run went on
        assert record["time/eval"] > 0
    assert "checker exploded" in (run_dir / "eval" / "1" / "math500" / "error.txt").read_text()
    assert (run_dir / "plots" / "eval.png").stat().st_size > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    for name in ("eval/aime25", "eval/heldout"):
        logged = events.Scalars(name)
        assert [e.step for e in logged] == [r["step"] for r in records]
        assert [e.value for e in logged] == pytest.approx([r[name] for r in records])


@pytest.mark.slow
@pytest.mark.parametrize("done", [1, 2])
def test_scores_equal_launch_evaluate_on_the_checkpoint(evaluated_run, eval_data, tmp_path, done):
    """Update `done - 1`'s eval/* are launch/evaluate.py's on checkpoint iter_<done>: with rollout_ahead 1 the
    engine had been synced to those weights, and nothing else generated, when the evaluation ran."""
    run_dir, records = evaluated_run
    model = tmp_path / "hf"
    proc = subprocess.run([sys.executable, str(REPO / "launch" / "convert_to_hf.py"), "--checkpoint",
                           str(run_dir / "checkpoints" / f"iter_{done:07d}"), "--output", str(model)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    reference = launch_evaluate(model, eval_data, tmp_path / "eval", f"iter{done}")
    for suite in SUITES:
        ours = run_dir / "eval" / str(done) / suite / "cap12"
        assert raw_answers(ours) == raw_answers(reference / suite / "cap12")
        summary = json.loads((reference / suite / "cap12" / "summary.json").read_text())
        assert records[done - 1][f"eval/{suite}"] == pytest.approx(summary["score"], abs=1e-9)
        assert (ours / "records.jsonl").read_text() == (reference / suite / "cap12" / "records.jsonl").read_text()


@pytest.mark.slow
def test_the_two_evaluations_saw_different_weights(evaluated_run):
    """The answers after update 1 differ from those after update 2 (so the comparison above can fail)."""
    run_dir, _ = evaluated_run
    answers = [[raw_answers(run_dir / "eval" / str(done) / suite / "cap12") for suite in SUITES] for done in (1, 2)]
    assert answers[0] != answers[1]


@pytest.mark.slow
def test_heldout_verdicts_are_the_verifiers(evaluated_run, demo_models):
    """The held-out records are judged again here by a fresh set of verifiers, and the metric recomputed."""
    run_dir, records = evaluated_run
    tokenizer = PromptTokenizer.from_pretrained(demo_models / "student")
    prompts = PromptSet.load(sample_file("student/train_3domain.jsonl"), tokenizer, domains=["math", "code", "ifeval"],
                             max_prompt_tokens=1024, model_vocab=1024)
    records_file = run_dir / "eval" / "2" / "heldout" / "records.jsonl"
    rows = [json.loads(line) for line in records_file.read_text().splitlines()]
    assert [r["index"] for r in rows] == [p.index for p in prompts.prompts[:3]] and all(r["n"] == 2 for r in rows)
    with Verifiers(domains={row["domain"] for row in rows}) as verifiers:
        verdicts = [verifiers.verify(row["domain"], text, prompts[i].label) is True
                    for i, row in enumerate(rows) for text in row["responses"]]
    assert [v is True for row in rows for v in row["verdicts"]] == verdicts
    assert records[1]["eval/heldout"] == pytest.approx(100 * sum(verdicts) / len(verdicts))


def test_a_missing_catalog_is_refused_at_start_up(demo_models, tmp_path):
    overrides = tiny_overrides(demo_models, tmp_path, updates=1) + eval_overrides(tmp_path / "no-eval-data")
    with pytest.raises(Exception, match=r"eval\.suites: ifbench: .*no prepared catalog of ifbench"):
        run(load_config(TrainerConfig, [DEMO], overrides))
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize(("override", "message"), [
    ("eval.suites=[aime24]", r"eval\.suites: must be distinct names among"),
    ("eval.suites=[]", r"eval\.every: is 1 but there is nothing to evaluate"),
    ("eval.n=0", r"eval\.n: must be >= 1"),
])
def test_bad_eval_options_name_the_option(demo_models, eval_data, tmp_path, override, message):
    overrides = tiny_overrides(demo_models, tmp_path, updates=1) + eval_overrides(eval_data) + [override]
    with pytest.raises(Exception, match=message):
        load_config(TrainerConfig, [DEMO], overrides)


def torchrun(processes, overrides, run_dir):
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--master_port",
               str(free_port()), str(REPO / "launch" / "pretrain_dnmopd.py"), "--config", str(DEMO),
               *[arg for o in overrides for arg in ("--set", o)]]
    return subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=600, cwd=run_dir)


@pytest.mark.slow
def test_data_parallel_ranks_wait_for_rank_0(demo_models, eval_data, tmp_path):
    """Two data-parallel ranks: rank 0 evaluates while rank 1 waits; a start-up error on rank 0 stops both."""
    dp = ["data.sampler.prompts_per_rollout=2"]
    overrides = tiny_overrides(demo_models, tmp_path, updates=1) + eval_overrides(eval_data, ("ifbench",)) + dp
    proc = torchrun(2, overrides, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = read_metrics(tmp_path)
    assert record["eval_failures"] == 0.0 and 0 <= record["eval/ifbench"] <= 100
    assert (tmp_path / "run" / "eval" / "1" / "ifbench" / "cap12" / "records.jsonl").is_file()

    (tmp_path / "unprepared").mkdir()  # there (a missing folder is refused before the run starts) but empty
    broken = tiny_overrides(demo_models, tmp_path, updates=1, name="broken") + eval_overrides(tmp_path / "unprepared")
    broken += dp
    proc = torchrun(2, broken, tmp_path)
    assert proc.returncode != 0
    assert "eval.suites: ifbench:" in proc.stderr and "failed on rank 0" in proc.stderr  # rank 1 names it too
