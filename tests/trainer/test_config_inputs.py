"""A run's inputs are checked before it starts (`TrainerConfig.check_inputs`, run by the command lines and so by
`--print-config`): a missing model folder or input file is an error naming its key and where it was set, while
loading a config alone (as the config tests do with placeholder paths) checks nothing on disk."""

import subprocess
import sys
from pathlib import Path

import pytest

from dnmopd.config import ConfigError, load_config
from dnmopd.trainer.config import TrainerConfig

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "demo_cpu.yaml"


def demo_overrides(models: Path) -> list[str]:
    teachers = ", ".join(f"{{backend: inprocess, name: {d}_teacher, model_path: {models / f'{d}_teacher'}}}"
                         for d in ("math", "code", "ifeval"))
    return [f"student.hf_path={models / 'student'}", f"rollout.engine.model_path={models / 'student'}",
            f"teachers.models=[{teachers}]"]


def load(models, *overrides, files=(DEMO,)):
    return load_config(TrainerConfig, list(files), [*demo_overrides(models), *overrides], check_inputs=True)


def test_the_demo_has_its_inputs(demo_models):
    assert load(demo_models).student.hf_path == str(demo_models / "student")


@pytest.mark.parametrize("override, key, problem", [
    ("student.hf_path={missing}", "student.hf_path", "no folder {missing}"),
    ("rollout.engine.model_path={tokenizer}", "rollout.engine.model_path", "no model folder at {tokenizer} "
                                                                           "(no config.json in it)"),
    ("teachers.models.1.model_path={missing}", "teachers.models.1.model_path", "no folder {missing}"),
    ("data.train_file={missing}/train.jsonl", "data.train_file", "no file {missing}/train.jsonl"),
    ("data.train_file=samples:student/nothing.jsonl", "data.train_file", "no sample file 'student/nothing.jsonl'"),
    ("logging.probe.prompt_files=[samples:teacher/math_train.jsonl, {missing}/if.jsonl]",
     "logging.probe.prompt_files.1", "no file {missing}/if.jsonl"),
    ("logging.probe.file={missing}/probe.json", "logging.probe.file", "no file {missing}/probe.json"),
])
def test_a_missing_input_names_its_key_and_its_override(demo_models, tmp_path, override, key, problem):
    values = {"missing": tmp_path / "missing", "tokenizer": demo_models / "tokenizer"}
    override = override.format(**values)
    with pytest.raises(ConfigError) as error:
        load(demo_models, override)
    assert str(error.value).startswith(f"--set {override}: {key}: {problem.format(**values)}")


def test_evaluation_and_injection_inputs(demo_models, tmp_path):
    with pytest.raises(ConfigError, match=r"eval.data_dir: no folder .*nowhere \(prepare the suites"):
        load(demo_models, "eval.every=1", "eval.suites=[aime25]", f"eval.data_dir={tmp_path / 'nowhere'}")
    with pytest.raises(ConfigError, match=r"eval.prompts: no file"):
        load(demo_models, "eval.every=1", f"eval.prompts={tmp_path / 'heldout.jsonl'}")
    assert load(demo_models, f"eval.prompts={tmp_path / 'heldout.jsonl'}").eval.every == 0  # not evaluated: unread
    injection = ("method.injection={bank: " + str(tmp_path / "bank.jsonl") + "}", "rollout.verify=true",
                 "method.normalizer.multipliers=observe")
    with pytest.raises(ConfigError, match=r"method.injection.bank: no file"):
        load(demo_models, *injection)


def test_an_error_in_a_file_names_the_file_and_line(demo_models, tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"extends: {DEMO}\ndata:\n  train_file: {tmp_path / 'prompts.jsonl'}\n")
    with pytest.raises(ConfigError, match=rf"^{mine}:3: data.train_file: no file {tmp_path / 'prompts.jsonl'}"):
        load(demo_models, files=[mine])


def test_loading_alone_checks_nothing_on_disk(tmp_path):
    config = load_config(TrainerConfig, DEMO, [f"student.hf_path={tmp_path / 'later'}"])  # made on another machine
    assert config.student.hf_path == str(tmp_path / "later")


def test_print_config_refuses_a_missing_data_file(demo_models, tmp_path):
    overrides = [*demo_overrides(demo_models), "data.train_file=data/student/train_3domain.jsonl"]
    result = subprocess.run([sys.executable, str(REPO / "launch" / "pretrain_dnmopd.py"), "--config", str(DEMO),
                             *[a for o in overrides for a in ("--set", o)], "--print-config"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 2 and not result.stdout
    assert result.stderr.strip() == ("config error: --set data.train_file=data/student/train_3domain.jsonl: "
                                     "data.train_file: no file data/student/train_3domain.jsonl")
