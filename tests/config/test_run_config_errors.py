"""The run config (`TrainerConfig`) refuses out-of-range values and layouts that do not fit the model, at
`--print-config` time, naming the key and the file and line (or the --set) that set it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dnmopd.config import ConfigError, load_config
from dnmopd.examples.tiny import build_tiny_hf_checkpoint
from dnmopd.trainer.config import TrainerConfig

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo_cpu.yaml"


@pytest.fixture(scope="module")
def student(tmp_path_factory) -> Path:
    """A tiny Qwen3.5: 4 layers, 4 attention heads, 2 KV heads, 2/4 Gated DeltaNet key/value heads, FFN 128."""
    return build_tiny_hf_checkpoint(tmp_path_factory.mktemp("models") / "student", arch="qwen3_5")


SERVED_MATH_TEACHER = """\
teachers:
  models:
    - {backend: sglang, name: math_teacher, model_path: /models/math, vocab_size: 1024, pool: {urls: [h:1]}}
    - {backend: inprocess, name: code_teacher, model_path: runs/demo-models/code_teacher}
    - {backend: inprocess, name: ifeval_teacher, model_path: runs/demo-models/ifeval_teacher}
"""
"""The demo's teachers with the math teacher behind an SGLang server (no hidden states)."""


def run_file(tmp_path: Path, student: Path, body: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(f"extends: {DEMO}\nstudent:\n  hf_path: {student}\n" + textwrap.dedent(body))
    return path


@pytest.mark.parametrize("body, message", [
    ("optimizer:\n  lr: .inf\n", r"run.yaml:5: optimizer.lr: must be a finite number > 0, got inf"),
    ("optimizer:\n  adam_beta1: 1.5\n", r"run.yaml:5: optimizer.adam_beta1: must be in \[0, 1\), got 1.5"),
    ("optimizer:\n  adam_beta2: -0.1\n", r"run.yaml:5: optimizer.adam_beta2: must be in \[0, 1\)"),
    ("optimizer:\n  adam_eps: -1.0e-8\n", r"run.yaml:5: optimizer.adam_eps: must be a finite number > 0"),
    ("optimizer:\n  weight_decay: .nan\n", r"run.yaml:5: optimizer.weight_decay: expected a number, got nan"),
    ("optimizer:\n  weight_decay: -0.1\n", r"run.yaml:5: optimizer.weight_decay: must be a finite number >= 0"),
    ("optimizer:\n  clip_grad: .inf\n", r"run.yaml:5: optimizer.clip_grad: must be a finite number >= 0"),
    ("optimizer:\n  sgd_momentum: 1\n", r"run.yaml:5: optimizer.sgd_momentum: must be in \[0, 1\)"),
    ("optimizer:\n  min_lr: 1.0\n", r"run.yaml:5: optimizer.min_lr: must be in \[0, lr = 0.0002\], got 1.0"),
    ("optimizer:\n  lr_warmup_updates: -1\n", r"run.yaml:5: optimizer.lr_warmup_updates: must be >= 0"),
    ("rollout:\n  sampling:\n    temperature: hot\n", r"run.yaml:6: rollout.sampling.temperature: expected a number"),
    ("rollout:\n  engine: {backend: inprocess, max_batch_size: x}\n",
     r"run.yaml:5: rollout.engine.max_batch_size: expected an integer, got 'x'"),
    ("rollout:\n  verifyy: true\n", r"run.yaml:5: unknown key rollout.verifyy; did you mean 'verify'"),
    ("parallel:\n  tensor: 3\n", r"run.yaml:5: parallel.tensor: 3 does not divide num_attention_heads = 4 of the"),
    ("parallel:\n  tensor: 4\n", r"run.yaml:5: parallel.tensor: 4 does not divide linear_num_key_heads = 2"),
    ("parallel:\n  pipeline: 3\n", r"run.yaml:5: parallel.pipeline: 3 pipeline stages .* do not divide "
                                   r"num_hidden_layers = 4"),
    ("parallel:\n  pipeline: 2\n  virtual_pipeline: 4\n", r"run.yaml:5: parallel.pipeline: 8 pipeline stages"),
    ("data:\n  3: x\n", r"run.yaml:5: key data.3: YAML reads it as an integer, not as a name"),
    ("data:\n  on_bad_row: ignore\n", r"run.yaml:5: data.on_bad_row: must be fail or skip, got 'ignore'"),
    ("run:\n  mode: rl\n", r"run.yaml:5: run.mode: must be one of opd, grpo, sft, got 'rl'"),
    ("checkpoint:\n  keep_last: -1\n", r"run.yaml:5: checkpoint.keep_last: must be >= 0, got -1"),
    ("method:\n  loss: {kind: sampled_token}\ntrain:\n  optimizer_steps_per_update: 5\n",
     r"run.yaml:7: train.optimizer_steps_per_update: 48 responses per update .* not divisible into 5 equal steps"),
    ("method:\n  loss: {kind: full_vocab_reverse_kl}\ntrain:\n  optimizer_steps_per_update: 2\n",
     r"run.yaml:7: train.optimizer_steps_per_update: method.loss.kind full_vocab_reverse_kl supports one"),
    ("method:\n  normalizer: {bounds: [4.0, 0.25]}\n",
     r"run.yaml:5: method.normalizer.bounds: bounds must satisfy 0 <= lower <= upper .*got \(4.0, 0.25\)"),
    ("train:\n  logit_chunk_tokens: 0\n", r"run.yaml:5: train.logit_chunk_tokens: must be >= 1 or null, got 0"),
    ("run:\n  seed: 1180591620717411303424\n", r"run.yaml:5: run.seed: must be from 0 to 2\*\*32 - 1"),
    ("run:\n  name: ''\n", r"run.yaml:5: run.name: must be a plain folder name .*got ''"),
    ("run:\n  name: ../elsewhere\n", r"run.yaml:5: run.name: must be a plain folder name"),
    (SERVED_MATH_TEACHER, r"demo_cpu.yaml:51: logging.probe_every: the probe needs .* \['math_teacher'\] are servers"),
    (SERVED_MATH_TEACHER + "logging: {probe_every: 0}\nmethod:\n  loss: {kind: full_vocab_reverse_kl}\n",
     r"run.yaml:11: method.loss.kind: full_vocab_reverse_kl needs in-process teachers; \['math_teacher'\] are "),
])
def test_bad_values_name_the_key_and_its_line(tmp_path, student, body, message):
    with pytest.raises(ConfigError, match=message):
        load_config(TrainerConfig, run_file(tmp_path, student, body))


@pytest.mark.parametrize("override, message", [
    ("optimizer.lr=.inf", r"--set optimizer.lr=.inf: optimizer.lr: must be a finite number > 0, got inf"),
    ("parallel.tensor=3", r"--set parallel.tensor=3: parallel.tensor: 3 does not divide num_attention_heads"),
    ("rollout.sampling.top_p=[0.5", r"--set rollout.sampling.top_p=\[0.5: rollout.sampling.top_p: the value"),
    ("run.name=", r"--set run.name=: run.name: must be a plain folder name"),
    ("run.seed=1180591620717411303424", r"--set run.seed=1180591620717411303424: run.seed: must be from 0"),
    ("method.normalizer.bounds=[4, 0.25]", r"--set method.normalizer.bounds=\[4, 0.25\]: method.normalizer.bounds"),
    # a section's own check names the file that opened the section and the override inside it
    ("method.normalizer.multipliers=sometimes", r"dn_mopd.yaml:\d+ \(with --set method.normalizer.multipliers="
                                                r"sometimes\): method.normalizer: normalizer.multipliers must be"),
])
def test_bad_overrides_name_the_key(tmp_path, student, override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(TrainerConfig, run_file(tmp_path, student, ""), [override])


def test_layouts_that_fit_the_model_pass(tmp_path, student):
    config = load_config(TrainerConfig, run_file(tmp_path, student, "parallel: {tensor: 2, pipeline: 2}\n"))
    assert (config.parallel.tensor, config.parallel.pipeline) == (2, 2)
    unchecked = load_config(TrainerConfig, DEMO, [f"student.hf_path={tmp_path / 'not-built-yet'}",
                                                  "parallel.tensor=3"])
    assert unchecked.parallel.tensor == 3  # nothing to check against until the model exists


@pytest.mark.slow
def test_print_config_refuses_without_a_traceback(tmp_path, student):
    result = subprocess.run([sys.executable, str(ROOT / "launch" / "pretrain_dnmopd.py"), "--config",
                             str(run_file(tmp_path, student, "parallel:\n  tensor: 3\n")), "--print-config"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"config error: {tmp_path / 'run.yaml'}:5: parallel.tensor: 3 does not divide" in result.stderr


def test_print_config_loads_no_model_library(tmp_path, student):
    """Checking a config imports neither megatron-core nor transformers (a typo is found in about a second)."""
    models = tmp_path / "runs" / "demo-models"  # the folders the demo config names, relative to the working dir
    models.mkdir(parents=True)
    for name in ("student", "math_teacher", "code_teacher", "ifeval_teacher"):
        (models / name).symlink_to(student)
    check = ("import runpy, sys, contextlib, io\n"
             f"sys.argv = ['pretrain', '--config', {str(DEMO)!r}, '--print-config']\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             "    try:\n"
             f"        runpy.run_path({str(ROOT / 'launch' / 'pretrain_dnmopd.py')!r}, run_name='__main__')\n"
             "    except SystemExit as end:\n"
             "        assert not end.code, end.code\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'megatron', 'transformers', 'datasets'}))\n")
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"
