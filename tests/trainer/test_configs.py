"""The config tree under configs/: every combination the docs tell users to run loads and validates, holds the
paper's values (checked against numbers written out here, not read from the files), fits the models'
architectures, and bad keys fail with file and line. Also the server-map overlay of launch/slurm."""

import importlib.util
import math
import re
import tempfile
from pathlib import Path

import pytest

from dnmopd.config import ConfigError, dump_yaml, load_config
from dnmopd.serving.server_set import ServerSet
from dnmopd.serving.servers import write_server_map
from dnmopd.trainer.config import TrainerConfig

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"
RECIPES = ["student_opd", "teacher_grpo", "seqkd_sft"]
MODELS = ["tiny", "qwen3.5-2b", "qwen3.5-4b", "qwen3.5-9b", "qwen3-4b"]
TEACHERS = ["code_teacher", "ifeval_teacher", "math_teacher"]
LABEL_MAP = {"default": "code_teacher", "math": "math_teacher", "code": "code_teacher", "ifeval": "ifeval_teacher"}

# method -> (routing rule, single teacher, normalizer multipliers, fixed multipliers math/code/ifeval)
METHODS = {
    "label": ("label", None, "observe", None),
    "dn_mopd": ("label", None, "dn", None),
    "observe": ("label", None, "observe", None),
    "single_math": ("single", "math_teacher", "observe", None),
    "single_code": ("single", "code_teacher", "observe", None),
    "single_if": ("single", "ifeval_teacher", "observe", None),
    "uniform_pool": ("pool", None, "observe", None),
    "dynamic_router": ("dynamic", None, "observe", None),
    "annealed_injection": ("label", None, "observe", None),
    "fixed_w": ("label", None, "fixed", (2.0, 1.0, 0.25)),
    "fixed_math": ("label", None, "fixed", (2.0, 1.0, 1.0)),
    "fixed_if": ("label", None, "fixed", (1.0, 1.0, 0.25)),
    "frozen_update0_9b": ("label", None, "fixed", (1.768, 0.888, 0.25)),
    "frozen_update0_4b": ("label", None, "fixed", (2.009, 0.811, 0.341)),
    "frozen_update0_2b": ("label", None, "fixed", (2.102, 0.822, 0.431)),
    "token_share": ("label", None, "token_share", None),
}

# Architecture numbers of the released checkpoints: layers, query heads, KV heads, GDN key heads, GDN value heads
# (0: no GDN), vocabulary.
ARCHS = {
    "tiny": (4, 4, 2, 2, 4, 1024),
    "qwen3.5-2b": (24, 8, 2, 16, 16, 248320),
    "qwen3.5-4b": (32, 16, 4, 16, 32, 248320),
    "qwen3.5-9b": (32, 16, 4, 16, 32, 248320),
    "qwen3-4b": (36, 32, 8, 0, 0, 151936),
}
ONE_NODE_TRAINING_GPUS = 4  # the paper's placement: the student on GPUs 0-3 of one 8-GPU node


def load(*files, overrides=()):
    config = load_config(TrainerConfig, [CONFIGS / f"{f}.yaml" for f in files], overrides)
    with tempfile.TemporaryDirectory() as folder:  # the resolved config of a run directory loads back as itself
        resolved = Path(folder) / "config.yaml"
        resolved.write_text(dump_yaml(config))
        again = load_config(TrainerConfig, resolved)
        assert again == config and dump_yaml(again) == resolved.read_text()
    return config


def test_every_config_file_is_covered():
    files = {str(p.relative_to(CONFIGS).with_suffix("")) for folder in ("recipes", "models", "methods", "clusters")
             for p in (CONFIGS / folder).glob("*.yaml")}
    covered = ({f"recipes/{r}" for r in RECIPES} | {f"models/{m}" for m in MODELS} | {f"methods/{m}" for m in METHODS}
               | {"clusters/h100_4nodes_9b"})
    servers = {f for f in files if f.endswith(".servers")}
    assert files - servers == covered
    assert servers == {"clusters/one_node_8gpu.servers", "clusters/one_node_8gpu_grpo.servers",
                       "clusters/h100_4nodes_9b.rollout.servers", "clusters/h100_4nodes_9b.teachers.servers"}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("method", sorted(METHODS))
def test_student_recipe_with_every_method_and_model(method, model):
    config = load("recipes/student_opd", f"models/{model}", f"methods/{method}")
    routing, teacher, normalizer, fixed = METHODS[method]
    assert config.method.name == method
    assert config.method.routing.rule == routing and config.method.routing.teacher == teacher
    assert sorted(config.method.routing.teachers) == TEACHERS
    assert config.method.routing.label_map == (LABEL_MAP if routing == "label" else {})
    assert config.method.normalizer.multipliers == normalizer
    assert tuple(config.method.normalizer.bounds) == (0.25, 4.0)
    expected = None if fixed is None else dict(zip(["math", "code", "ifeval"], fixed, strict=True))
    assert config.method.normalizer.fixed == expected
    assert config.teachers.names() == ["math_teacher", "code_teacher", "ifeval_teacher"]
    assert config.method.loss.kind == "sampled_token"
    assert (config.method.loss.eps_low, config.method.loss.eps_high) == (0.2, 0.2)
    if method == "annealed_injection":
        injection = config.method.injection
        assert (injection.initial, injection.anneal_updates) == (1.0, 40) and config.rollout.verify
    else:
        assert config.method.injection is None


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_replaces_the_demo_method(method):
    loss = "sampled_token" if method == "annealed_injection" else "full_vocab_reverse_kl"  # injection: constants
    config = load("demo_cpu", f"methods/{method}", overrides=[f"method.loss.kind={loss}"])
    routing, teacher, normalizer, fixed = METHODS[method]
    assert config.method.name == method and config.method.routing.rule == routing
    assert config.method.routing.teacher == teacher and config.method.normalizer.multipliers == normalizer
    assert config.rollout.engine.backend == "inprocess"  # the rest of the demo stays


def test_injection_needs_the_sampled_token_loss():
    with pytest.raises(ConfigError, match=r"injection gives injected trajectories a constant advantage, which the "
                                          r"full_vocab_reverse_kl loss does not take"):
        load("demo_cpu", "methods/annealed_injection", overrides=["method.loss.kind=full_vocab_reverse_kl"])


def test_student_recipe_values():
    config = load("recipes/student_opd", "models/qwen3.5-4b", "methods/dn_mopd")
    assert config.run.mode == "opd" and config.run.seed == 1234
    assert config.data.sampler.prompts_per_rollout == 64 and config.data.samples_per_prompt == 8
    assert config.data.sampler.seed == 42 and config.data.max_prompt_tokens == 2048
    assert config.data.domains == ["math", "code", "ifeval"]
    sampling = config.rollout.sampling
    assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.max_new_tokens) == (1.0, 1.0, -1, 8192)
    assert sampling.seed is None  # SGLang servers refuse seeds unless they run deterministic inference
    assert config.rollout.engine.backend == "sglang"
    assert all(m.backend == "sglang" for m in config.teachers.models)
    opt = config.optimizer
    assert (opt.name, opt.lr, opt.lr_decay_style, opt.lr_warmup_updates) == ("adam", 1e-6, "constant", 5)
    assert (opt.adam_beta1, opt.adam_beta2, opt.weight_decay, opt.clip_grad) == (0.9, 0.98, 0.1, 1.0)
    assert (config.train.updates, config.train.optimizer_steps_per_update) == (80, 1)
    assert config.train.micro_batch_tokens >= 2048 + 8192  # one whole response per micro-batch
    assert config.checkpoint.save_every == 10 and config.checkpoint.export_hf
    assert not config.student.activation_recompute  # the paper's students ran without it
    assert config.teachers.fleet.on_failure == "mask"


def test_grpo_recipe_values():
    config = load("recipes/teacher_grpo", "models/qwen3.5-4b")
    assert config.run.mode == "grpo" and config.run.seed == 1234 and config.data.sampler.seed == 42
    assert config.data.sampler.prompts_per_rollout == 128 and config.data.samples_per_prompt == 8
    assert config.train.optimizer_steps_per_update == 4  # global batch 256 of 1,024 responses
    responses = config.data.sampler.prompts_per_rollout * config.data.samples_per_prompt
    assert responses // config.train.optimizer_steps_per_update == 256
    assert (config.rollout.sampling.temperature, config.rollout.sampling.top_p) == (1.0, 1.0)
    assert config.rollout.sampling.max_new_tokens == 8192 and config.data.max_prompt_tokens == 2048
    assert config.grpo.dynamic_sampling and config.grpo.max_generation_batches == 8
    assert config.verifiers.on_no_verdict == "wrong" and (config.grpo.eps_low, config.grpo.eps_high) == (0.2, 0.2)
    assert config.verifiers.math.rules == config.verifiers.code.rules == "paper"  # the teachers' rewards
    opt = config.optimizer
    assert (opt.lr, opt.lr_decay_style, opt.lr_warmup_updates) == (1e-6, "constant", 10)
    assert (opt.adam_beta1, opt.adam_beta2, opt.weight_decay, opt.clip_grad) == (0.9, 0.98, 0.1, 1.0)
    assert config.train.updates == 400 and config.checkpoint.save_every == 10
    assert config.student.activation_recompute and config.teachers.models == []
    assert config.data.train_file == Path("data/teacher/math_train.jsonl")


def test_seqkd_recipe_values():
    config = load("recipes/seqkd_sft", "models/qwen3.5-9b")
    assert config.run.mode == "sft" and config.rollout is None
    assert config.train.updates == 4 * 2700 // 128 == 84
    assert config.data.sampler.prompts_per_rollout == 128 and config.train.optimizer_steps_per_update == 1
    assert config.data.max_prompt_tokens == 8192 and config.sft.max_response_tokens == 16384
    assert config.sft.seed == 42 and config.data.sampler.seed == 42
    opt = config.optimizer
    assert (opt.lr, opt.min_lr, opt.lr_decay_style, opt.lr_warmup_updates) == (1e-5, 1e-6, "cosine", 5)
    assert (opt.adam_beta1, opt.adam_beta2, opt.weight_decay, opt.clip_grad) == (0.9, 0.98, 0.1, 1.0)
    assert config.checkpoint.save_every == 42 and config.student.activation_recompute
    assert config.method.routing.rule == "label" and config.method.routing.label_map == LABEL_MAP
    assert [m.backend for m in config.teachers.models] == ["inprocess"] * 3


@pytest.mark.parametrize("recipe", ["teacher_grpo", "seqkd_sft"])
@pytest.mark.parametrize("model", MODELS)
def test_other_recipes_with_every_model(recipe, model):
    config = load(f"recipes/{recipe}", f"models/{model}")
    assert config.student.activation_recompute  # the paper's GRPO and SFT runs recomputed activations


def padded(vocab, tp):
    return math.ceil(vocab / (128 * tp)) * 128 * tp


@pytest.mark.parametrize("model", MODELS)
def test_model_layouts_fit_the_architecture(model):
    config = load("recipes/student_opd", f"models/{model}", "methods/dn_mopd")
    layers, heads, kv_heads, gdn_k, gdn_v, vocab = ARCHS[model]
    tp, pp = config.parallel.tensor, config.parallel.pipeline
    assert heads % tp == 0 and kv_heads % tp == 0 and tp <= kv_heads  # gated attention: TP <= KV heads (mcore 0.16)
    assert gdn_k % tp == 0 and gdn_v % tp == 0 and layers % pp == 0
    assert padded(vocab, tp) % tp == 0
    assert config.student.gdn_backend == "auto"
    if model == "tiny":
        assert config.student.dtype == "float32" and (tp, pp) == (1, 1)
    else:
        assert config.student.dtype == "bfloat16"
        assert tp * pp == ONE_NODE_TRAINING_GPUS  # one model-parallel group on the student's 4 GPUs
        assert config.student.hf_path.startswith("/models/")  # a placeholder users override


def test_h100_cluster_layout():
    config = load("recipes/student_opd", "models/qwen3.5-9b", "methods/dn_mopd", "clusters/h100_4nodes_9b")
    layers, heads, kv_heads, gdn_k, gdn_v, vocab = ARCHS["qwen3.5-9b"]
    tp, pp = config.parallel.tensor, config.parallel.pipeline
    assert tp * pp == 2 * 8  # two training nodes of 8 GPUs, one model-parallel group
    assert kv_heads % tp == 0 and gdn_k % tp == 0 and gdn_v % tp == 0 and layers % pp == 0
    assert padded(vocab, tp) == vocab  # no padded vocabulary rows at TP 4
    assert config.student.activation_recompute
    for recipe in ("teacher_grpo", "seqkd_sft"):
        assert load(f"recipes/{recipe}", "models/qwen3.5-9b", "clusters/h100_4nodes_9b").parallel.pipeline == 4


def servers(name):
    return load_config(ServerSet, CONFIGS / "clusters" / f"{name}.servers.yaml")


def test_server_layouts():
    one_node = servers("one_node_8gpu")
    by_name = {}
    for spec in one_node.servers:
        by_name.setdefault(spec.name, []).append(spec)
        assert spec.backend == "sglang" and spec.host == "127.0.0.1"
    assert sorted(by_name) == ["code_teacher", "ifeval_teacher", "math_teacher", "rollout"]
    assert [s.gpus for s in by_name["rollout"]] == ["0", "1", "2", "3"]  # beside the student's 4 GPUs
    assert [by_name[t][0].gpus for t in ("math_teacher", "code_teacher", "ifeval_teacher")] == ["4", "5", "6"]
    fractions = [by_name[t][0].extra_args[1] for t in ("math_teacher", "code_teacher", "ifeval_teacher")]
    assert fractions == ["0.35", "0.35", "0.85"]
    rollout_path = by_name["rollout"][0].model_path
    opd = load("recipes/student_opd", "models/qwen3.5-4b", "methods/dn_mopd")
    assert rollout_path == opd.student.hf_path  # the placeholders agree: the overlay's check passes as shipped

    grpo = servers("one_node_8gpu_grpo")
    assert {s.name for s in grpo.servers} == {"rollout"} and sorted(s.gpus for s in grpo.servers) == list("01234567")

    rollout, teachers = servers("h100_4nodes_9b.rollout"), servers("h100_4nodes_9b.teachers")
    assert sorted(s.gpus for s in rollout.servers) == list("01234567")
    assert sorted(s.gpus for s in teachers.servers) == list("01234567")
    replicas = {}
    for spec in teachers.servers:
        replicas[spec.name] = replicas.get(spec.name, 0) + 1
    assert replicas == {"math_teacher": 3, "code_teacher": 3, "ifeval_teacher": 2}
    assert all(s.host == "0.0.0.0" for s in rollout.servers + teachers.servers)  # reached from other nodes
    assert rollout.map_path != teachers.map_path


def test_demo_config():
    config = load("demo_cpu")
    assert config.run.name == "demo-cpu" and config.method.name == "dn_mopd"
    assert config.rollout.engine.backend == "inprocess"
    assert config.teachers.names() == ["math_teacher", "code_teacher", "ifeval_teacher"]
    tiny = load("recipes/seqkd_sft", "models/tiny")
    assert config.student.hf_path == tiny.student.hf_path == "runs/demo-models/student"


# ------------------------------------------------------------------------------------------- errors
def test_a_typo_names_the_file_and_line(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text(f"extends: [{CONFIGS}/recipes/student_opd.yaml, {CONFIGS}/methods/dn_mopd.yaml]\n"
                   "student: {hf_path: /models/x}\n"
                   "optimizer:\n"
                   "  lr: 1.0e-6\n"
                   "  lr_warmup_update: 3\n")
    with pytest.raises(ConfigError, match=rf"{run}:5: unknown key optimizer.lr_warmup_update; did you mean "
                                          r"'lr_warmup_updates'"):
        load_config(TrainerConfig, [run])


def test_a_typo_inside_a_committed_file_names_it(tmp_path):
    method = tmp_path / "method.yaml"
    method.write_text((CONFIGS / "methods" / "fixed_w.yaml").read_text().replace("fixed: {", "fixd: {"))
    with pytest.raises(ConfigError, match=rf"{method}:\d+: unknown key method.normalizer.fixd"):
        load_config(TrainerConfig, [CONFIGS / "recipes/student_opd.yaml", CONFIGS / "models/qwen3.5-2b.yaml",
                                    method])
    line = next(i for i, text in enumerate(method.read_text().splitlines(), 1) if "fixd" in text)
    with pytest.raises(ConfigError, match=rf"{method}:{line}:"):
        load_config(TrainerConfig, [CONFIGS / "recipes/student_opd.yaml", CONFIGS / "models/qwen3.5-2b.yaml",
                                    method])


def test_a_typo_in_an_override_names_the_override():
    with pytest.raises(ConfigError, match=r"--set train.update=3: unknown key train.update; did you mean 'updates'"):
        load("recipes/student_opd", "models/tiny", "methods/label", overrides=["train.update=3"])


def test_a_bad_value_names_where_it_was_set():
    with pytest.raises(ConfigError, match=r"methods/label.yaml:\d+ \(with --set method.routing.teachers="
                                          r"\[math_teacher, code_teacher\]\): method.routing: routing.label_map "
                                          r"names unregistered teachers \['ifeval_teacher'\]"):
        load("recipes/student_opd", "models/tiny", "methods/label",
             overrides=["method.routing.teachers=[math_teacher, code_teacher]"])



@pytest.mark.parametrize("override, message", [
    ("rollout.sampling.temperature=0", r"temperature: must be > 0, got 0.0: training needs a sampling distribution"),
    ("rollout.sampling.top_p=0.9", r"top_p: must be 1, got 0.9: the trainer's log-probs cannot represent"),
    ("rollout.sampling.top_k=20", r"top_k: must be -1, got 20: the trainer's log-probs cannot represent"),
    ("train.rollout_ahead=2", r"train.rollout_ahead: must be 0 or 1, got 2"),
    ("verifiers.on_no_verdict=zero", r"verifiers.on_no_verdict must be one of \('wrong', 'stop'\)"),
])
def test_what_the_loss_cannot_represent_is_refused(override, message):
    with pytest.raises(ConfigError, match=message):
        load("recipes/student_opd", "models/tiny", "methods/dn_mopd", overrides=[override])


def test_overlapped_rollout_needs_a_rollout():
    config = load("recipes/student_opd", "models/tiny", "methods/dn_mopd", overrides=["train.rollout_ahead=1",
                                                                                      "rollout.sampling.temperature=0.7"])
    assert config.train.rollout_ahead == 1 and config.rollout.sampling.temperature == 0.7
    with pytest.raises(ConfigError, match="run.mode sft has no rollout"):
        load("recipes/seqkd_sft", "models/tiny", overrides=["train.rollout_ahead=1"])

# ------------------------------------------------------------------------------------------- server overlay
def overlay_tool():
    spec = importlib.util.spec_from_file_location("servers_overlay", REPO / "launch" / "slurm" / "servers_overlay.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


H100_RUN = ["recipes/student_opd", "models/qwen3.5-9b", "methods/uniform_pool", "clusters/h100_4nodes_9b"]


def h100_maps(tmp_path, student="/models/Qwen3.5-9B"):
    """The server maps start_servers.py writes for the two server nodes of the H100 layout (bind-all hosts)."""
    rollout, teachers = tmp_path / "servers-0.json", tmp_path / "servers-1.json"
    write_server_map(rollout, {"rollout": ("sglang", student, [f"http://0.0.0.0:{30000 + i}" for i in range(8)])})
    write_server_map(teachers, {
        "math_teacher": ("sglang", "/ckpt/math", [f"http://0.0.0.0:{30100 + i}" for i in range(3)]),
        "code_teacher": ("sglang", "/ckpt/code", [f"http://0.0.0.0:{30200 + i}" for i in range(3)]),
        "ifeval_teacher": ("sglang", "/ckpt/ifeval", ["http://0.0.0.0:30300", "http://0.0.0.0:30301"]),
    })
    return rollout, teachers


def run_overlay(tmp_path, maps, files=H100_RUN, overrides=()):
    args = [a for f in files for a in ("--config", str(CONFIGS / f"{f}.yaml"))]
    args += [a for o in overrides for a in ("--set", o)] + [a for m in maps for a in ("--map", m)]
    output = tmp_path / "servers.yaml"
    return overlay_tool().main([*args, "--output", str(output), "--update-dir", str(tmp_path / "weights")]), output


def test_overlay_from_server_maps(tmp_path):
    rollout, teachers = h100_maps(tmp_path)
    status, output = run_overlay(tmp_path, [f"{rollout}@gpu-node-2", f"{teachers}@gpu-node-3"])
    assert status == 0
    config = load_config(TrainerConfig, [CONFIGS / f"{f}.yaml" for f in H100_RUN] + [output])
    engine = config.rollout.engine.config
    assert engine.pool.urls == [f"http://gpu-node-2:{30000 + i}" for i in range(8)]
    assert engine.model_path == "/models/Qwen3.5-9B" and engine.update_dir == str(tmp_path / "weights")
    assert engine.pool.max_connections == 512 and engine.pool.request_timeout_s == 1800  # the recipe's options stay
    models = {m.config.name: m.config for m in config.teachers.models}
    assert list(models) == ["math_teacher", "code_teacher", "ifeval_teacher"]
    assert models["math_teacher"].model_path == "/ckpt/math"
    assert models["ifeval_teacher"].pool.urls == ["http://gpu-node-3:30300", "http://gpu-node-3:30301"]
    assert all(m.pool.max_connections == 96 for m in models.values())


def test_replicas_on_several_maps_are_joined(tmp_path):
    rollout, teachers = h100_maps(tmp_path)
    extra = tmp_path / "servers-2.json"
    write_server_map(extra, {"math_teacher": ("sglang", "/ckpt/math", ["http://10.0.0.7:30100"])})
    status, output = run_overlay(tmp_path, [f"{rollout}@n2", f"{teachers}@n3", str(extra)])
    assert status == 0
    config = load_config(TrainerConfig, [CONFIGS / f"{f}.yaml" for f in H100_RUN] + [output])
    assert config.teachers.models[0].config.pool.urls[-2:] == ["http://n3:30102", "http://10.0.0.7:30100"]


def test_overlay_errors(tmp_path, capsys):
    rollout, teachers = h100_maps(tmp_path)
    status, _ = run_overlay(tmp_path, [f"{rollout}@n2"])
    err = capsys.readouterr().err
    assert status == 2 and "teacher math_teacher (" in err and "has no server in the maps" in err
    status, _ = run_overlay(tmp_path, [str(rollout), f"{teachers}@n3"])
    assert status == 2 and "binds every interface; name the server node" in capsys.readouterr().err
    status, _ = run_overlay(tmp_path, [f"{rollout}@n2", f"{teachers}@n3"], overrides=["student.hf_path=/other"])
    assert status == 2 and "must start from the student's initial weights" in capsys.readouterr().err
    status, _ = run_overlay(tmp_path, [f"{rollout}@n2", f"{teachers}@n3"],
                            files=["recipes/student_opd", "models/qwen3.5-9b", "methods/single_math"],
                            overrides=["teachers.models=[{backend: sglang, name: math_teacher, model_path: x, "
                                       "pool: {urls: [h:1]}}]"])
    assert status == 2 and "servers ['code_teacher', 'ifeval_teacher']" in capsys.readouterr().err
    write_server_map(teachers, {"math_teacher": ("vllm", "/ckpt/math", ["http://n3:1"])})
    status, _ = run_overlay(tmp_path, [f"{rollout}@n2", str(teachers)],
                            files=["recipes/student_opd", "models/qwen3.5-9b", "methods/single_math"],
                            overrides=["teachers.models=[{backend: sglang, name: math_teacher, model_path: x, "
                                       "pool: {urls: [h:1]}}]"])
    assert status == 2 and "configured as sglang but" in capsys.readouterr().err
    assert not (tmp_path / "servers.yaml").exists()  # nothing written on an error


def test_overlay_leaves_in_process_runs_alone(tmp_path):
    """SeqKD-SFT has no rollout engine and in-process teachers: no server is needed or allowed."""
    rollout, _ = h100_maps(tmp_path)
    status, _ = run_overlay(tmp_path, [f"{rollout}@n2"], files=["recipes/seqkd_sft", "models/qwen3.5-9b"])
    assert status == 2  # the rollout servers are not used by this run


# ------------------------------------------------------------------------------------------- docs
def test_configuration_reference_is_current():
    spec = importlib.util.spec_from_file_location("gen_configuration", REPO / "docs" / "gen_configuration.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, "run python docs/gen_configuration.py"


@pytest.mark.parametrize("doc", ["docs/cluster.md", "docs/configuration.md"])
def test_files_the_docs_name_exist(doc):
    text = (REPO / doc).read_text()
    named = set(re.findall(r"(?:configs|launch)/[\w./-]+\.(?:yaml|py|sbatch)", text))
    assert named and not sorted(p for p in named if not (REPO / p).exists())
