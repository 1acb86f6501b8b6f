"""Weight-space merges (dnmopd.hf.merge, `launch/merge_checkpoints.py`) against float64 references and
transformers."""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file, save_file
from student_helpers import VOCAB, build_test_tokenizer, probe_ids

from dnmopd.examples.tiny import build_tiny_hf_checkpoint
from dnmopd.hf.merge import DEFAULT_MAX_SHARD_BYTES, CheckpointMerge
from dnmopd.student.weights import SafetensorsFolder

SCRIPT = Path(__file__).parents[2] / "launch" / "merge_checkpoints.py"
NUM_MTP_TENSORS = 15


def _tensors(folder) -> dict[str, torch.Tensor]:
    reader = SafetensorsFolder(folder)
    return {name: reader.get(name) for name in reader.keys()}


def _edit_weights(folder: Path, edit) -> Path:
    path = folder / "model.safetensors"
    state = load_file(path)
    edit(state)
    save_file(state, path, metadata={"format": "pt"})
    return folder


def _variant(source, target: Path, edit=None) -> Path:
    """A copy of the checkpoint folder ``source``, its weights changed by ``edit(state_dict)``."""
    shutil.copytree(source, target)
    return _edit_weights(target, edit) if edit else target


def _strip_mtp(state: dict) -> None:
    for name in [n for n in state if n.startswith("mtp.")]:
        del state[name]


@pytest.fixture(scope="module")
def vl(tmp_path_factory) -> dict:
    """Released Qwen3.5 VL layout: a base with an MTP head and three fine-tune-like experts (the base moved 5 %
    towards another random model) without one, as RL exports are."""
    root = tmp_path_factory.mktemp("merge_vl")
    tokenizer = build_test_tokenizer(root / "tokenizer")
    common = dict(arch="qwen3_5", vocab_size=VOCAB, vision_language=True, tokenizer_dir=tokenizer)
    base = build_tiny_hf_checkpoint(root / "base", seed=10, **common)
    theta0 = load_file(base / "model.safetensors")

    def fine_tune(state: dict) -> None:
        _strip_mtp(state)
        state.update({name: theta0[name] + 0.05 * (value - theta0[name]) for name, value in state.items()})

    experts = [
        _edit_weights(build_tiny_hf_checkpoint(root / f"expert{k}", seed=11 + k, **common), fine_tune)
        for k in range(3)
    ]
    return {"base": base, "experts": experts}


@pytest.fixture(scope="module")
def bf16(tmp_path_factory) -> list[Path]:
    """Three tied Qwen3 experts in bfloat16."""
    root = tmp_path_factory.mktemp("merge_bf16")
    return [
        build_tiny_hf_checkpoint(
            root / f"expert{k}", arch="qwen3", vocab_size=VOCAB, seed=20 + k, num_layers=2, tie_word_embeddings=True,
            dtype="bfloat16",
        )
        for k in range(3)
    ]


def _merge(out: Path, experts, base=None, method="average", **options) -> Path:
    config = CheckpointMerge.Config(
        method=method, experts=[str(e) for e in experts], base=str(base) if base else None, **options
    )
    return config.build().write(out, log=lambda *_: None)


def _reference(method: str, experts: list[dict], base: dict | None, lam: float, name: str) -> torch.Tensor:
    """The merge of one tensor computed in float64."""
    thetas = [e[name].double() for e in experts]
    if method == "average":
        return sum(thetas) / len(thetas)
    theta0 = base[name].double()
    return theta0 + lam * sum(t - theta0 for t in thetas)


@pytest.mark.parametrize(
    ("method", "with_base", "lam"),
    [
        ("average", False, None),
        ("average", True, None),
        ("task_arithmetic", True, None),
        ("task_arithmetic", True, 0.7),
    ],
)
def test_merge_matches_float64_reference(vl, tmp_path, method, with_base, lam):
    base = vl["base"] if with_base else None
    out = _merge(tmp_path / "merged", vl["experts"], base, method, lam=lam)
    merged = _tensors(out)
    experts = [_tensors(e) for e in vl["experts"]]
    base_tensors = _tensors(vl["base"])
    assert sorted(merged) == sorted(experts[0])  # base-only MTP head left out
    assert len([n for n in base_tensors if n.startswith("mtp.")]) == NUM_MTP_TENSORS
    for name, value in merged.items():
        reference = _reference(method, experts, base_tensors, 1.0 if lam is None else lam, name)
        assert value.dtype == torch.float32
        torch.testing.assert_close(value.double(), reference, rtol=1e-6, atol=1e-6, msg=name)

    card = (out / "README.md").read_text()
    assert f"method `{method}`" in card and str(vl["experts"][2]) in card
    # Hub metadata (local inputs have no Hub id: no base_model); files readable as any new file under the umask
    assert ModelCard.load(out / "README.md").data.to_dict() == {"library_name": "transformers",
                                                                 "tags": ["dnmopd", "model-merging"]}
    umask = os.umask(0)
    os.umask(umask)
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o666 & ~umask}
    if lam is not None:
        assert "theta_0 + 0.7 * sum_k" in card and "lambda = 0.7" in card
    assert (f"Left out: {NUM_MTP_TENSORS} `mtp.*`" in card) == with_base
    source = vl["base"] if with_base else vl["experts"][0]
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (out / name).read_bytes() == (source / name).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merged"]  # no temporary folder left


def test_task_arithmetic_model_loads_and_matches_hand_merged_state_dict(vl, tmp_path):
    from transformers import AutoModelForCausalLM

    out = _merge(tmp_path / "ta", vl["experts"], vl["base"], "task_arithmetic")

    def load(path):
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    base = load(vl["base"])
    theta0 = {n: t.double() for n, t in base.state_dict().items()}
    expert_states = [load(e).state_dict() for e in vl["experts"]]
    merged = {n: theta0[n] + sum(s[n].double() - theta0[n] for s in expert_states) for n in theta0}
    base.load_state_dict({n: t.float() for n, t in merged.items()})
    loaded, info = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"]
    ids = probe_ids()
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(ids).logits, base(ids).logits, rtol=1e-5, atol=1e-5)


def test_dtype_of_first_expert_kept_per_tensor(bf16, tmp_path):
    def to_float32(name):
        return lambda state: state.update({name: state[name].float()})

    first = _variant(bf16[0], tmp_path / "first", to_float32("model.norm.weight"))
    second = _variant(bf16[1], tmp_path / "second", to_float32("model.layers.0.mlp.down_proj.weight"))
    experts = [first, second, bf16[2]]
    merged = _tensors(_merge(tmp_path / "merged", experts))
    inputs = [_tensors(e) for e in experts]
    for name, value in merged.items():
        assert value.dtype == inputs[0][name].dtype, name
        reference = _reference("average", inputs, None, 1.0, name)
        # float32 accumulation: at most one rounding to the output dtype away from the float64 value
        ulp = torch.finfo(value.dtype).eps * reference.abs().clamp_min(torch.finfo(value.dtype).tiny)
        assert ((value.double() - reference).abs() <= ulp).all(), name
    assert merged["model.norm.weight"].dtype == torch.float32
    assert merged["model.embed_tokens.weight"].dtype == torch.bfloat16


def test_sharded_inputs_and_outputs(vl, tmp_path):
    experts = vl["experts"]
    copy = _variant(experts[0], tmp_path / "copy")
    sharded = _merge(tmp_path / "sharded", [experts[0], copy], max_shard_bytes=64 * 1024)
    files = sorted(p.name for p in sharded.glob("*.safetensors"))
    assert len(files) > 1 and (sharded / "model.safetensors.index.json").is_file()
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == files
    original = _tensors(experts[0])
    assert all(torch.equal(t, original[n]) for n, t in _tensors(sharded).items())  # (x + x) / 2 == x

    from_sharded = _tensors(_merge(tmp_path / "a", [sharded, *experts[1:]]))
    from_single = _tensors(_merge(tmp_path / "b", experts))
    assert all(torch.equal(t, from_single[n]) for n, t in from_sharded.items())
    assert DEFAULT_MAX_SHARD_BYTES == 4_800_000_000


def test_integer_tensors_must_be_equal(bf16, tmp_path):
    def with_counter(value):
        return lambda state: state.update({"model.zz_counter": torch.tensor([value, 7], dtype=torch.int64)})

    equal = [_variant(e, tmp_path / f"equal{k}", with_counter(3)) for k, e in enumerate(bf16)]
    out = _merge(tmp_path / "merged", equal)
    merged = _tensors(out)
    assert merged["model.zz_counter"].dtype == torch.int64 and merged["model.zz_counter"].tolist() == [3, 7]
    assert "- 1 integer tensors (equal in every input) copied unchanged." in (out / "README.md").read_text()

    different = _variant(bf16[2], tmp_path / "different", with_counter(4))
    with pytest.raises(ValueError, match=r"integer tensor 'model.zz_counter' differs between .*equal0.* and .*differ"):
        _merge(tmp_path / "refused", [*equal[:2], different])
    as_float = _variant(bf16[2], tmp_path / "as_float", lambda s: s.update({"model.zz_counter": torch.ones(2)}))
    with pytest.raises(ValueError, match="'model.zz_counter' is a float tensor in some inputs and an integer one"):
        _merge(tmp_path / "refused", [*equal[:2], as_float])


def test_failure_while_merging_leaves_no_output(bf16, tmp_path):
    """The integer check fails at the last tensor, after shards were written: nothing is left behind."""
    experts = [_variant(e, tmp_path / f"e{k}", lambda s, k=k: s.update({"model.zz_step": torch.tensor(k)}))
               for k, e in enumerate(bf16)]
    output = tmp_path / "out"
    with pytest.raises(ValueError, match="integer tensor 'model.zz_step'"):
        _merge(output, experts, max_shard_bytes=1024)
    assert not output.exists() and not list(tmp_path.glob(".out.tmp*"))

    output.mkdir()
    (output / "marker").write_text("previous merge")
    with pytest.raises(ValueError):
        _merge(output, experts, max_shard_bytes=1024)
    assert [p.name for p in output.iterdir()] == ["marker"] and not list(tmp_path.glob(".out.tmp*"))


def _drop(name):
    return lambda state: state.pop(name)


def _reshape(name):
    return lambda state: state.update({name: state[name][:-1]})


@pytest.mark.parametrize(
    ("role", "edit", "message"),
    [
        ("expert", _drop("model.language_model.norm.weight"),
         r"tensor 'model.language_model.norm.weight' is in expert 1 .*expert0/model.safetensors but not in expert 2 "),
        ("expert", _reshape("model.language_model.norm.weight"),
         r"tensor 'model.language_model.norm.weight' has shape \[64\] in .*expert0/model.safetensors but \[63\] in "
         r".*variant/model.safetensors"),
        ("base", _drop("model.visual.merger.norm.weight"),
         r"tensor 'model.visual.merger.norm.weight' is in expert 1 .* but not in base .*variant"),
        ("expert", lambda s: s.update({"mtp.norm.weight": torch.ones(64)}),
         r"tensor 'mtp.norm.weight' is in expert 2 .*variant/model.safetensors but not in expert 1"),
        ("expert", lambda s: s.update({"model.language_model.norm.weight": s["model.language_model.norm.weight"]
                                       .to(torch.float8_e4m3fn)}),
         r"'model.language_model.norm.weight' in .*variant/model.safetensors has dtype F8_E4M3: quantized"),
    ],
    ids=["missing", "shape", "base-missing", "mtp-in-one-expert", "float8"],
)
def test_tensor_mismatches_are_refused(vl, tmp_path, role, edit, message):
    source = vl["base"] if role == "base" else vl["experts"][1]
    variant = _variant(source, tmp_path / "variant", edit)
    experts = [vl["experts"][0], variant if role == "expert" else vl["experts"][1], vl["experts"][2]]
    base = variant if role == "base" else vl["base"]
    with pytest.raises(ValueError, match=message):
        _merge(tmp_path / "out", experts, base, "task_arithmetic")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.tmp*"))


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2))


def test_side_files_must_be_equal(vl, tmp_path):
    experts = vl["experts"]
    stamped = _variant(experts[1], tmp_path / "stamped")
    _edit_json(stamped / "config.json", lambda c: c.update(transformers_version="0.0.1"))
    _merge(tmp_path / "ok", [experts[0], stamped], vl["base"], "task_arithmetic", lam=1.0)  # writer stamp ignored

    changed = _variant(experts[1], tmp_path / "changed")
    _edit_json(changed / "config.json", lambda c: c["text_config"].update(rms_norm_eps=1e-5))
    with pytest.raises(ValueError, match=r"config.json differs between base .* and expert 2 .*changed: "
                                         r"text_config.rms_norm_eps \(1e-06 vs 1e-05\)"):
        _merge(tmp_path / "out", [experts[0], changed], vl["base"], "task_arithmetic")

    template = _variant(experts[1], tmp_path / "template")
    (template / "chat_template.jinja").write_text("{{ messages }}")
    with pytest.raises(ValueError, match=r"chat_template.jinja differs between expert 1 .* and expert 2 .*template: "
                                         "the contents differ"):
        _merge(tmp_path / "out", [experts[0], template])

    sharded = _merge(tmp_path / "sharded", experts[:2], max_shard_bytes=64 * 1024)
    lost = sorted(sharded.glob("model-*.safetensors"))[1]
    lost.unlink()
    with pytest.raises(FileNotFoundError, match=rf"expert 2 .*sharded: the index lists {lost.name}, which is missing"):
        _merge(tmp_path / "out", [experts[0], sharded])

    no_config = _variant(experts[1], tmp_path / "no_config")
    (no_config / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"expert 2 .*no_config: no config.json"):
        _merge(tmp_path / "out", [experts[0], no_config])
    assert not (tmp_path / "out").exists()


def test_missing_side_file_is_noted(vl, tmp_path):
    lean = _variant(vl["experts"][1], tmp_path / "lean")
    (lean / "tokenizer.json").unlink()
    logged = []
    config = CheckpointMerge.Config(experts=[str(vl["experts"][0]), str(lean)])
    out = config.build().write(tmp_path / "out", log=logged.append)
    note = f"tokenizer.json of the expert 1 not compared: expert 2 {lean} has none"
    assert f"note: {note}" in logged and f"Note: {note}." in (out / "README.md").read_text()
    assert (out / "tokenizer.json").read_bytes() == (vl["experts"][0] / "tokenizer.json").read_bytes()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(method="task_arithmetic", lam=1 / 3), r"lam = 0.333.* is \(within 1 %\) 1/3.*use method 'average'"),
        (dict(method="task_arithmetic", lam=0.334), "1/3"),
        (dict(method="task_arithmetic", lam=0.0), "finite and > 0"),
        (dict(method="task_arithmetic", lam=-1.0), "finite and > 0"),
        (dict(method="task_arithmetic", lam=math.nan), "finite and > 0"),
        (dict(method="task_arithmetic", lam=math.inf), "finite and > 0"),
        (dict(method="average", lam=1.0), "lam applies to method 'task_arithmetic' only"),
        (dict(method="task_arithmetic", base=None), "needs the base model"),
        (dict(method="ties"), "method must be one of"),
        (dict(method="average", experts=["a"]), "at least two"),
        (dict(method="average", experts=["a", "./a"]), "listed twice"),
        (dict(method="task_arithmetic", experts=["a", "b", "c"], base="a"), "listed twice"),
        (dict(method="task_arithmetic", experts=["a", "b"], lam=0.5), "1/2"),
        (dict(max_shard_bytes=0), "max_shard_bytes must be > 0"),
    ],
)
def test_config_validation(options, message):
    options = {"experts": ["a", "b", "c"], "base": "base", **options}
    with pytest.raises(ValueError, match=message):
        CheckpointMerge.Config(**options)


def test_lambda_rule_accepts_other_values():
    for lam, experts in ((1.0, 3), (0.3, 3), (0.5, 3), (2.0, 3), (1 / 3, 2), (1.0, 2)):
        config = CheckpointMerge.Config(
            method="task_arithmetic", base="base", experts=[f"e{k}" for k in range(experts)], lam=lam
        )
        assert config.scale == lam
    assert CheckpointMerge.Config(method="task_arithmetic", base="base", experts=["a", "b"]).scale == 1.0


def test_output_may_not_be_an_input(vl):
    with pytest.raises(ValueError, match="the output folder is one of the inputs"):
        _merge(vl["experts"][1], vl["experts"][:2])


def _cli(*args) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


def test_command_line_end_to_end(vl, tmp_path):
    experts, base = vl["experts"], vl["base"]
    proc = _cli("--method", "task_arithmetic", "--base", base, "--experts", *experts, "--output",
                tmp_path / "ta", "--max-shard-size", "64KiB")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert f"leaving out {NUM_MTP_TENSORS} base-only mtp.*" in proc.stdout and f"wrote {tmp_path / 'ta'}" in proc.stdout
    assert len(list((tmp_path / "ta").glob("model-*-of-*.safetensors"))) > 1
    expected = _tensors(_merge(tmp_path / "api", experts, base, "task_arithmetic"))
    merged = _tensors(tmp_path / "ta")
    assert sorted(merged) == sorted(expected) and all(torch.equal(merged[n], expected[n]) for n in expected)

    proc = _cli("--method", "task_arithmetic", "--base", base, "--experts", *experts, "--lam", "0.3333",
                "--output", tmp_path / "refused")
    assert proc.returncode != 0 and "merge failed:" in proc.stderr and "use method 'average'" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "refused").exists()

    proc = _cli("--method", "average", "--experts", *experts, "--output", tmp_path / "avg")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "avg" / "model.safetensors").is_file()  # one shard under the 4,800 MB default

    proc = _cli("--help")
    assert proc.returncode == 0 and "merge_checkpoints.py --method average" in proc.stdout

    proc = _cli("--method", "average", "--experts", *experts, "--output", tmp_path / "x", "--max-shard-size", "5XB")
    assert proc.returncode == 2 and "cannot parse size '5XB'" in proc.stderr and not (tmp_path / "x").exists()
