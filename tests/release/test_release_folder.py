"""What a trainer-written release holds: a Hub-valid model card, configs that every engine reads the same way,
and files with the modes of the user's umask (the checkpoints too)."""

from __future__ import annotations

import json
import stat

import pytest
from huggingface_hub import ModelCard
from huggingface_hub.utils import validate_repo_id
from release_runs import UMASK, pretrain

pytestmark = pytest.mark.slow  # one short trainer run per architecture (shared with the serving tests)

ARCHS = ["qwen3", "qwen3_5"]


def last_metrics(run_dir) -> dict:
    return json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])


@pytest.mark.parametrize("arch", ARCHS)
def test_model_card_metadata_is_hub_valid(trainer_run, arch):
    run_dir = trainer_run(arch)
    card = ModelCard.load(run_dir / "release" / "README.md")  # huggingface_hub's parser: strict YAML metadata
    data = card.data.to_dict()
    assert data["library_name"] == "transformers" and data["pipeline_tag"] == "text-generation"
    assert {"dnmopd", "on-policy-distillation", "dn-mopd", "math", "code", "ifeval"} <= set(data["tags"])
    if arch == "qwen3_5":  # from checkpoint.release (the tiny base is a local folder, never written as base_model)
        assert data["base_model"] == "Qwen/Qwen3.5-0.8B" and data["license"] == "apache-2.0"
        assert data["base_model_relation"] == "finetune"
        validate_repo_id(data["base_model"])
    else:
        assert "base_model" not in data and "license" not in data
    assert ModelCard(str(card)).data.to_dict() == data  # round-trips through the Hub card format

    text = card.text
    assert text.lstrip().startswith(f"# tiny-{arch}\n")  # the run name
    assert "Exported from the trained model in memory at the end of the run (update 2 of 2)." in text
    for usage in ("AutoModelForCausalLM.from_pretrained(", "vllm serve ", "python -m sglang.launch_server"):
        assert usage in text
    assert (run_dir / "config.yaml").read_text().rstrip() in text  # the resolved training config
    metrics = last_metrics(run_dir)
    row = next(line for line in text.splitlines() if line.startswith("| kl |"))  # the sampled-token KL per domain
    assert row == "| kl | " + " | ".join(f"{metrics[f'kl/{d}']:.4g}" if f"kl/{d}" in metrics else ""
                                         for d in ("math", "code", "ifeval")) + " |"
    assert any(f"kl/{d}" in metrics for d in ("math", "code", "ifeval"))


def test_running_a_finished_run_again_keeps_its_release_card(trainer_run):
    """A finished run started again (its resolved config) resumes at its end, exports the release again and
    keeps the card's metrics, which come from the last update it logged."""
    run_dir = trainer_run("qwen3")
    card = (run_dir / "release" / "README.md").read_text()
    pretrain(["--config", str(run_dir / "config.yaml")])
    assert (run_dir / "release" / "README.md").read_text() == card and "| kl |" in card


@pytest.mark.parametrize("arch", ARCHS)
def test_configs_agree_with_each_other_and_the_tokenizer(trainer_run, arch):
    from transformers import AutoTokenizer

    release = trainer_run(arch) / "release"
    config = json.loads((release / "config.json").read_text())
    generation = json.loads((release / "generation_config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(release)
    assert config["torch_dtype"] == config["dtype"] == "float32"
    if arch == "qwen3_5":
        interval = config["full_attention_interval"]
        assert [t == "full_attention" for t in config["layer_types"]] == \
            [(i + 1) % interval == 0 for i in range(config["num_hidden_layers"])]
    stops = generation["eos_token_id"]
    assert config["eos_token_id"] in stops and tokenizer.eos_token_id in stops
    assert config["pad_token_id"] == generation["pad_token_id"] == tokenizer.pad_token_id


@pytest.mark.parametrize("arch", ARCHS)
def test_release_and_checkpoints_have_the_modes_of_the_umask(trainer_run, arch):
    run_dir = trainer_run(arch)
    wrong = []
    for path in [run_dir, *run_dir.rglob("*")]:
        want = (0o777 if path.is_dir() else 0o666) & ~UMASK
        if stat.S_IMODE(path.stat().st_mode) != want:
            wrong.append(f"{path.relative_to(run_dir)}: {stat.S_IMODE(path.stat().st_mode):o}")
    assert not wrong, wrong
    assert (run_dir / "release" / "model.safetensors").is_file()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["iter_0000001", "iter_0000002"]


def test_a_converted_run_checkpoint_is_the_live_release(trainer_run, tmp_path):
    """launch/convert_to_hf.py on the run's last checkpoint writes the same model as the end-of-run export, and
    its card takes the training config and final metrics from the run directory."""
    import os
    import subprocess
    import sys

    from release_runs import REPO
    from safetensors.torch import load_file

    run_dir = trainer_run("qwen3")
    output = tmp_path / "converted"
    proc = subprocess.run([sys.executable, str(REPO / "launch" / "convert_to_hf.py"), "--checkpoint",
                           str(run_dir / "checkpoints" / "iter_0000002"), "--output", str(output)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    live, converted = (load_file(folder / "model.safetensors") for folder in (run_dir / "release", output))
    assert sorted(live) == sorted(converted) and all(live[k].equal(converted[k]) for k in live)
    for name in ("config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja"):
        assert (output / name).read_bytes() == (run_dir / "release" / name).read_bytes(), name
    card = ModelCard.load(output / "README.md")
    assert card.text.lstrip().startswith("# tiny-qwen3\n")
    assert "Exported from the training checkpoint iter_0000002 (update 2)." in card.text
    assert (run_dir / "config.yaml").read_text().rstrip() in card.text
    live_card = (run_dir / "release" / "README.md").read_text()
    final = live_card[live_card.index("## Final metrics"):live_card.index("## Training configuration")]
    assert final in card.text
