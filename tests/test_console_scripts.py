"""The installed package (a wheel, as `make venv` installs it) carries the command lines as console scripts and
the configs as package data, so a user runs them outside a checkout: `dnmopd-train --print-config --config
configs/demo_cpu.yaml` finds the shipped config."""

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import yaml

from dnmopd.examples.demo_models import build_demo_models

BIN = Path(sys.executable).parent
SCRIPTS = {"dnmopd-train": "dnmopd.launch.pretrain_dnmopd:main", "dnmopd-eval": "dnmopd.launch.evaluate:main",
           "dnmopd-convert": "dnmopd.launch.convert_to_hf:main", "dnmopd-servers": "dnmopd.launch.start_servers:main"}


def test_the_wheel_has_the_console_scripts_configs_and_command_lines():
    scripts = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")
               if e.dist is not None and e.dist.name == "dnmopd"}
    assert scripts == SCRIPTS
    installed = {str(path) for path in importlib.metadata.files("dnmopd")}
    checkout = Path(__file__).resolve().parents[1]
    for config in (checkout / "configs").rglob("*.yaml"):
        assert f"dnmopd/configs/{config.relative_to(checkout / 'configs')}" in installed
    assert {"dnmopd/launch/pretrain_dnmopd.py", "dnmopd/launch/slurm/dnmopd.sbatch",
            "dnmopd/launch/slurm/servers_overlay.py"} <= installed
    assert not [path for path in installed if path.startswith("dnmopd/launch/bench_")]  # they read the checkout


def test_the_commands_run_outside_a_checkout(tmp_path):
    build_demo_models(tmp_path / "runs" / "demo-models")  # `make demo` builds them where it runs
    result = subprocess.run([BIN / "dnmopd-train", "--print-config", "--config", "configs/demo_cpu.yaml"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    assert config["run"]["name"] == "demo-cpu" and config["method"]["name"] == "dn_mopd"  # its `extends` followed
    assert config["data"]["train_file"] == "samples:student/train_3domain.jsonl"
    for name in ("dnmopd-eval", "dnmopd-convert", "dnmopd-servers"):
        shown = subprocess.run([BIN / name, "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert shown.returncode == 0 and shown.stdout.startswith("usage: "), (name, shown.stderr)
    module = subprocess.run([sys.executable, "-m", "dnmopd.launch.pretrain_dnmopd", "--help"], capture_output=True,
                            text=True, cwd=tmp_path, timeout=120)  # what `torchrun -m dnmopd.launch....` runs
    assert module.returncode == 0 and "--print-config" in module.stdout
