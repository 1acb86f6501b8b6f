"""The run config: one typed tree, loaded from YAML (`dnmopd.config.load_config`), saved resolved in the run
directory. Components own their sections' dataclasses (`X.Config`); this module composes them and checks the
rules that cross components."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from dnmopd.config import Backend, Choice, FieldValueError
from dnmopd.core.clipping import validate_clip
from dnmopd.data.sample_data import resolve_data_path
from dnmopd.data.sampler import PromptSampler
from dnmopd.hf.model_card import CardConfig
from dnmopd.rollout import rollout_class
from dnmopd.rollout.base import SamplingParams
from dnmopd.serving.weight_group import WeightGroup
from dnmopd.student.arch import StudentArch
from dnmopd.student.options import StudentConfig
from dnmopd.student.parallel import ParallelDims
from dnmopd.teachers import teacher_class
from dnmopd.teachers.fleet import TeacherFleet
from dnmopd.trainer.experience.verification import Verification
from dnmopd.trainer.measurements.evaluation import TrainingEvaluation
from dnmopd.trainer.measurements.metrics import MetricsLogger
from dnmopd.trainer.measurements.probe import ProbeConfig
from dnmopd.trainer.method import MethodConfig
from dnmopd.trainer.modes.base import mode_class


def teacher_config_class(backend: str) -> type:
    return teacher_class(backend).Config


def rollout_config_class(backend: str) -> type:
    return rollout_class(backend).Config


MAX_SEED = 2**32 - 1
"""Largest seed every seeded library of a run accepts (numpy's legacy seeding is 32-bit)."""


def _require(ok: bool, key: str, problem: str) -> None:
    if not ok:
        raise FieldValueError(key, problem)


def _require_model(path: str | Path, key: str) -> None:
    _require((Path(path) / "config.json").is_file(), key,
             f"no model folder at {path} (no config.json in it)" if Path(path).is_dir() else f"no folder {path}")


def _require_file(path: Path, key: str) -> None:
    try:
        resolved = resolve_data_path(path)
    except (KeyError, FileNotFoundError) as error:
        raise FieldValueError(key, str(error).strip('"')) from None
    _require(resolved.is_file(), key, f"no file {resolved}")


def check_layout(hf_path: str, parallel: ParallelDims.Config) -> None:
    """Refuse tensor/pipeline sizes that do not divide the student (read from its config.json), as megatron-core
    would once the run has started; a model folder that is not there yet is not checked."""
    if not (Path(hf_path) / "config.json").is_file():
        return
    try:
        arch = StudentArch.from_hf_dir(hf_path)
    except ValueError as err:
        raise FieldValueError("student.hf_path", str(err)) from None
    tp, where = parallel.tensor, f"the model {hf_path}"
    counts = {"num_attention_heads": arch.num_attention_heads, "intermediate_size": arch.ffn_hidden_size}
    if arch.gdn:
        counts |= {"linear_num_key_heads": arch.gdn.num_key_heads, "linear_num_value_heads": arch.gdn.num_value_heads}
    for name, count in counts.items():
        _require(count % tp == 0, "parallel.tensor", f"{tp} does not divide {name} = {count} of {where}")
    groups = arch.num_query_groups
    _require(groups % tp == 0 or tp % groups == 0, "parallel.tensor",
             f"{tp} is neither a multiple nor a divisor of num_key_value_heads = {groups} of {where}")
    stages = parallel.pipeline * (parallel.virtual_pipeline or 1)
    _require(arch.num_layers % stages == 0, "parallel.pipeline",
             f"{stages} pipeline stages (pipeline x virtual_pipeline) do not divide num_hidden_layers = "
             f"{arch.num_layers} of {where}")


@dataclass(kw_only=True, slots=True)
class RunConfig:
    name: str
    """Run name: outputs go to <output_dir>/<name> (resolved config, metrics, checkpoints, plots, release)."""
    output_dir: Path = Path("runs")
    """Parent folder of run directories."""
    mode: str = "opd"
    """opd (on-policy distillation of a student), grpo (RL of a domain teacher), sft (SeqKD-SFT)."""
    seed: int = 1234
    """Seed of model-parallel RNG, dropout and the in-process rollout's sampling."""

    def __post_init__(self):
        modes = mode_class.names
        _require(self.mode in modes, "mode", f"must be one of {', '.join(modes)}, got {self.mode!r}")
        _require(self.name not in ("", ".", "..") and "/" not in self.name and "\0" not in self.name, "name",
                 f"must be a plain folder name (its run directory goes under output_dir), got {self.name!r}")
        _require(0 <= self.seed <= MAX_SEED, "seed", f"must be from 0 to 2**32 - 1, got {self.seed}")

    @property
    def directory(self) -> Path:
        return self.output_dir / self.name


@dataclass(kw_only=True, slots=True)
class DataConfig:
    train_file: Path = Path("samples:student/train_3domain.jsonl")
    """Prompt file in the release schema (`samples:<file>` = the embedded sample data)."""
    domains: list[str] = field(default_factory=lambda: ["math", "code", "ifeval"])
    """Domains in a fixed order (the columns of the DN statistics); every row's metadata.domain must be one."""
    sampler: PromptSampler.Config = field(default_factory=PromptSampler.Config)
    """Prompts per rollout batch (over all data-parallel ranks), shuffle seed and order."""
    samples_per_prompt: int = 8
    """n: responses sampled per prompt (the paper: 8)."""
    max_prompt_tokens: int = 2048
    """Longer prompts are dropped at start-up (and reported)."""
    on_bad_row: str = "fail"
    """fail: a malformed row stops the run; skip: it is left out and reported."""

    def __post_init__(self):
        for name in ("samples_per_prompt", "max_prompt_tokens"):
            _require(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        _require(self.on_bad_row in ("fail", "skip"), "on_bad_row", f"must be fail or skip, got {self.on_bad_row!r}")
        _require(bool(self.domains) and len(set(self.domains)) == len(self.domains), "domains",
                 f"must be a non-empty list of distinct names, got {self.domains}")


SYNC_MODES = ("disk", "distributed")


@dataclass(kw_only=True, slots=True)
class RolloutConfig:
    engine: Annotated[Choice, Backend(rollout_config_class)]
    """The student's generation engine: {backend: inprocess | sglang | vllm, ...its options}."""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    """temperature, top_p, top_k, max_new_tokens, stop_token_ids, seed. The trainer's log-probs, ratio and
    advantages use the same tempered distribution (logits / temperature); top_p and top_k truncation, which
    the loss cannot represent, are refused (keep top_p 1 and top_k -1, as the paper)."""
    verify: bool = False
    """Judge every response with its domain's rule-based verifier (the `verifiers` section; logged as
    accuracy/<domain>); always on for GRPO and annealed injection."""
    sync: str = "disk"
    """How each update's weights reach the rollout servers (docs/weight-sync.md). disk: written as a Hugging Face
    folder under the engine's update_dir, which every server loads. distributed (SGLang): broadcast from the
    sending trainer rank over a process group with every server's ranks (gloo on CPU, NCCL on GPU; options in
    `distributed`), no folder. Either way every server is probed after the update. The in-process engine takes
    the tensors in memory whatever this says."""
    sender_dp_rank: int = 0
    """The data-parallel rank whose model-parallel leader sends the weights to the shared rollout servers (and
    hosts the process group under sync distributed): any rank, e.g. one on the node nearest the servers."""
    distributed: WeightGroup.Config = field(default_factory=WeightGroup.Config)
    """The process group of sync distributed: backend, rendezvous host and port on the sending rank, bucket size,
    time-outs."""

    weight_probe_tolerance: float = 0.02
    """Largest mean |served - trainer's| log-prob over the probe sequence that checks each weight sync: above it
    the engine is taken not to serve the new weights and the run stops. 0.02 holds for float32 serving and for
    bfloat16 serving of the real models. The CPU demo's tiny models, whose logits are large, served by vLLM in
    bfloat16 (its CPU Gated DeltaNet kernel's only dtype) differ from the trainer's float32 by 0.015-0.025 and
    take 0.05 (configs/demo_servers.yaml, whose learning rate moves the probe by 0.1-0.3 per update: a server
    that kept the old weights still fails)."""

    def __post_init__(self):
        _require(self.sync in SYNC_MODES, "sync", f"must be one of {', '.join(SYNC_MODES)}, got {self.sync!r}")
        _require(self.sender_dp_rank >= 0, "sender_dp_rank", f"must be >= 0, got {self.sender_dp_rank}")
        backend = self.engine.backend
        _require(self.sync != "distributed" or rollout_class(backend).distributed_sync, "sync",
                 f"distributed needs a rollout backend that takes broadcast weights (sglang), not {backend}")
        _require(math.isfinite(self.weight_probe_tolerance) and self.weight_probe_tolerance > 0,
                 "weight_probe_tolerance", f"must be a finite number > 0, got {self.weight_probe_tolerance}")


@dataclass(kw_only=True, slots=True)
class TeachersConfig:
    models: list[Annotated[Choice, Backend(teacher_config_class)]] = field(default_factory=list)
    """One entry per teacher: {backend: inprocess | sglang | vllm, name: ..., ...its options}."""
    fleet: TeacherFleet.Config = field(default_factory=TeacherFleet.Config)
    """Failure policy (on_failure: mask | stop)."""
    self_test: bool = True
    """Before update 1, each teacher scores a fixed few prompt+response pairs rendered with the student's chat
    template, twice, and continues one greedily; the run is refused, with the cause named, when its vocabulary,
    special-token ids or chat template differ from the student's, or its log-probs are non-finite, zero-filled,
    uniform, constant, not deterministic, or not above the uniform baseline on its own greedy continuation
    (dnmopd/teachers/self_test.py; the result of each is the trainer's `teacher_self_test`). It costs about
    0.12 s per CPU demo teacher (0.37 s for the three, on each model-parallel leader)."""

    def names(self) -> list[str]:
        return [m.config.name for m in self.models]


@dataclass(kw_only=True, slots=True)
class OptimizerConfig:
    name: str = "adam"
    """adam (the paper's) or sgd (with momentum; steadier than Adam when a tiny batch makes gradients noisy)."""
    lr: float = 1e-6
    """Peak learning rate."""
    min_lr: float = 0.0
    """Final learning rate of the cosine/linear decay."""
    lr_warmup_updates: int = 5
    """Linear warm-up over this many optimizer steps (clamped to the run's length - 1)."""
    lr_decay_style: str = "constant"
    """constant, linear or cosine after the warm-up."""
    weight_decay: float = 0.1
    """Decoupled (AdamW-style) weight decay of the weight matrices (megatron exempts biases and norm scales)."""
    adam_beta1: float = 0.9
    """Adam's first-moment decay."""
    adam_beta2: float = 0.98
    """Adam's second-moment decay."""
    adam_eps: float = 1e-8
    """Adam's epsilon."""
    sgd_momentum: float = 0.9
    """Momentum of optimizer.name sgd."""
    clip_grad: float = 1.0
    """Clip the global gradient norm to this value (0: off)."""

    def __post_init__(self):
        _require(self.name in ("adam", "sgd"), "name", f"must be adam or sgd, got {self.name!r}")
        _require(math.isfinite(self.lr) and self.lr > 0, "lr", f"must be a finite number > 0, got {self.lr}")
        _require(math.isfinite(self.min_lr) and 0 <= self.min_lr <= self.lr, "min_lr",
                 f"must be in [0, lr = {self.lr}], got {self.min_lr}")
        _require(self.lr_decay_style in ("constant", "linear", "cosine"), "lr_decay_style",
                 f"must be constant, linear or cosine, got {self.lr_decay_style!r}")
        _require(self.lr_warmup_updates >= 0, "lr_warmup_updates", f"must be >= 0, got {self.lr_warmup_updates}")
        for name in ("weight_decay", "clip_grad"):
            value = getattr(self, name)
            _require(math.isfinite(value) and value >= 0, name, f"must be a finite number >= 0, got {value}")
        for name in ("adam_beta1", "adam_beta2", "sgd_momentum"):
            value = getattr(self, name)
            _require(0 <= value < 1, name, f"must be in [0, 1), got {value}")
        _require(math.isfinite(self.adam_eps) and self.adam_eps > 0, "adam_eps",
                 f"must be a finite number > 0, got {self.adam_eps}")


@dataclass(kw_only=True, slots=True)
class TrainConfig:
    updates: int = 80
    """Rollout-update cycles to run."""
    optimizer_steps_per_update: int = 1
    """Optimizer steps per rollout batch (1: ratio == 1, no old-log-prob forward; >1: PPO epochs over
    equal slices of the batch with old log-probs computed once)."""
    micro_batch_tokens: int = 16384
    """Tokens per forward/backward micro-batch (a longer sequence gets one alone): packed, the sum of the packed
    sequences' lengths; padded, sequences x longest sequence."""
    packing: bool = True
    """Pack each micro-batch's sequences into one row (THD, no padding computed), balancing the micro-batches'
    token counts; false: right-padded micro-batches (longest first; with pipeline parallelism every micro-batch
    padded to the batch's longest sequence)."""
    logit_chunk_tokens: int | None = None
    """Tokens per chunk of the fused LM-head kernel (None: sized by the kernel)."""
    rollout_ahead: int = 0
    """0: each update trains on a batch its own weights generated (the paper's on-policy loop). 1: the next
    update's batch is generated (and scored) while this one trains, by the previous weights; the loss then
    takes its ratio against the generating policy's log-probs (docs/training.md, "The update loop")."""

    def __post_init__(self):
        for name in ("updates", "optimizer_steps_per_update", "micro_batch_tokens"):
            _require(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        _require(self.rollout_ahead in (0, 1), "rollout_ahead", f"must be 0 or 1, got {self.rollout_ahead}")
        _require(self.logit_chunk_tokens is None or self.logit_chunk_tokens >= 1, "logit_chunk_tokens",
                 f"must be >= 1 or null, got {self.logit_chunk_tokens}")


@dataclass(kw_only=True, slots=True)
class CheckpointConfig:
    save_every: int = 10
    """Save a resumable checkpoint every this many updates (and after the last one)."""
    keep_last: int = 2
    """Keep only this many newest checkpoints (0: keep all)."""
    resume: bool | Literal["fresh"] = True
    """true: continue from the newest complete checkpoint (its files checked; a damaged one falls back to the
    previous), an error when the run has checkpoints but none is complete; fresh: start over, removing the
    run's checkpoints; false: start at update 0, an error when the run already has checkpoints."""
    allow_changes: list[str] = field(default_factory=list)
    """Changes a resume accepts (docs/resume.md): every checkpoint records what it was trained on (the resolved
    config, each input file's content, each model folder's identity), and a resume refuses any difference unless
    an entry here covers its key, a dotted config key or a prefix of one (`*` for any list index), e.g.
    [train.updates, optimizer.lr] to extend a run at a new learning rate. Accepted changes apply from the resumed
    step (a changed lr or schedule length rebuilds the LR schedule there) and are logged once at start-up."""
    export_hf: bool = True
    """Write a Hugging Face release of the final student to <run_dir>/release."""
    release: CardConfig = field(default_factory=CardConfig)
    """Model-card metadata of the release: base_model (a Hub id) and license."""

    def __post_init__(self):
        _require(self.save_every >= 1, "save_every", f"must be >= 1, got {self.save_every}")
        _require(self.keep_last >= 0, "keep_last", f"must be >= 0, got {self.keep_last}")
        _require(all(key.strip(". ") for key in self.allow_changes), "allow_changes",
                 f"must be a list of dotted config keys, got {self.allow_changes}")


@dataclass(kw_only=True, slots=True)
class LoggingConfig:
    metrics: MetricsLogger.Config = field(default_factory=MetricsLogger.Config)
    """Where per-update metrics go besides <run_dir>/metrics.jsonl (TensorBoard, W&B)."""
    progress: bool = True
    """Show a live progress display on rank 0 (plain log lines when not a terminal)."""
    report: bool = True
    """Draw the PNG plots of the run at the end."""
    probe_every: int = 0
    """Measure the fixed probe set's exact full-vocabulary KL to the routed teachers (`probe_kl/*`) after the
    first update, every this many updates and after the last (0: off). run.mode opd only (other modes do not
    take it), with in-process teachers (server teachers are refused);
    each measurement is one forward of the student over its probe share (the CPU demo's 48 responses of 32
    tokens: 0.39 s a measurement, 12 s of its 125 s), plus sampling and teacher scoring once at start (3.7 s)."""
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    """Where the probe set's prompts and responses come from (dnmopd/trainer/measurements/probe.py)."""

    def __post_init__(self):
        _require(self.probe_every >= 0, "logging.probe_every", f"must be >= 0 (0: off), got {self.probe_every}")


@dataclass(kw_only=True, slots=True)
class GRPOConfig:
    dynamic_sampling: bool = True
    """Keep only prompt groups whose rewards vary (bounded by max_generation_batches)."""
    max_generation_batches: int = 8
    """Most rollout batches drawn per update by dynamic sampling before groups are kept unconditionally."""
    eps_low: float = 0.2
    """PPO clip: ratio >= 1 - eps_low for negative advantages."""
    eps_high: float = 0.2
    """PPO clip: ratio <= 1 + eps_high for positive advantages."""
    dual_clip: float | None = None
    """Dual-clip constant c > 1 capping the loss of negative advantages at -c A (null: off)."""

    def __post_init__(self):
        _require(self.max_generation_batches >= 1, "max_generation_batches",
                 f"must be >= 1, got {self.max_generation_batches}")
        validate_clip(self.eps_low, self.eps_high, self.dual_clip)


@dataclass(kw_only=True, slots=True)
class SFTConfig:
    data: Path | None = None
    """SeqKD answers (JSONL written by the generation step); None: <run_dir>/seqkd.jsonl, generated if missing."""
    max_response_tokens: int = 16384
    """Longest teacher answer generated (and trained on)."""
    seed: int = 42
    """Sampling seed of the generation."""

    def __post_init__(self):
        _require(self.max_response_tokens >= 1, "max_response_tokens", f"must be >= 1, got {self.max_response_tokens}")
        _require(0 <= self.seed <= MAX_SEED, "seed", f"must be from 0 to 2**32 - 1, got {self.seed}")


@dataclass(kw_only=True, slots=True)
class TrainerConfig:
    run: RunConfig
    """Run name, output folder, mode (opd, grpo, sft) and seed."""
    student: StudentConfig
    """The student: hf_path of the initial weights + build options (dtype, GDN backend, recompute)."""
    parallel: ParallelDims.Config = field(default_factory=ParallelDims.Config)
    """Tensor/pipeline layout of the student; data parallel = processes / (tensor x pipeline)."""
    data: DataConfig = field(default_factory=DataConfig)
    """Prompt file, domains, sampler and lengths."""
    rollout: RolloutConfig | None = None
    """The student's rollout engine and sampling (opd and grpo)."""
    teachers: TeachersConfig = field(default_factory=TeachersConfig)
    """The teachers (opd; the answering teachers of sft) and their failure policy."""
    method: MethodConfig = field(default_factory=MethodConfig)
    """The distillation method: routing, multipliers, injection, loss (opd; routing in sft)."""
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    """GRPO options (run.mode grpo)."""
    verifiers: Verification.Config = field(default_factory=Verification.Config)
    """The rule-based verifiers (math grader, code judge) and what a missing verdict means."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """SeqKD-SFT options (run.mode sft)."""
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    """Optimizer, learning-rate schedule, weight decay and gradient clipping."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """Run length, optimizer steps per update and micro-batching."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoints, resume and the Hugging Face release."""
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """Metrics sinks, progress display and the end-of-run plots."""
    eval: TrainingEvaluation.Config = field(default_factory=TrainingEvaluation.Config)
    """Evaluation during training through the run's rollout engine (docs/evaluation.md), logged as eval/*."""

    def __post_init__(self):
        check_layout(self.student.hf_path, self.parallel)
        samples = self.run.mode in ("opd", "grpo")
        _require(not samples or self.rollout is not None, "run.mode",
                 f"{self.run.mode} samples from the student: set rollout.engine")
        if samples:
            sampling = self.rollout.sampling
            _require(sampling.temperature > 0, "rollout.sampling.temperature",
                     f"must be > 0, got {sampling.temperature}: training needs a sampling distribution; greedy "
                     "decoding gives none to take the loss's ratio against")
            for name, full in (("top_p", 1), ("top_k", -1)):
                _require(getattr(sampling, name) == full, f"rollout.sampling.{name}",
                         f"must be {full}, got {getattr(sampling, name)}: the trainer's log-probs cannot represent "
                         "a truncated sampling distribution (the temperature is honoured)")
        _require(self.run.mode != "sft" or not self.train.rollout_ahead, "train.rollout_ahead",
                 "overlaps the student's rollout with training; run.mode sft has no rollout (set it to 0)")
        _require(not self.eval.every or self.rollout is not None, "eval.every",
                 f"evaluates through the student's rollout engine; run.mode {self.run.mode} has none (set it to 0)")
        _require(self.method.injection is None or self.rollout is None or self.rollout.verify, "rollout.verify",
                 "method.injection picks the response to replace by its verdict: set rollout.verify true")
        if self.run.mode == "opd":
            names = self.teachers.names()
            _require(len(set(names)) == len(names), "teachers.models", f"duplicate teacher names {names}")
            missing = sorted(set(self.method.routing.teachers) - set(names))
            _require(not missing, "method.routing",
                     f"names teachers {missing} that teachers.models does not define; defined: {names}")
            kind = self.method.loss.kind
            if kind == "full_vocab_reverse_kl":
                remote = [m.config.name for m in self.teachers.models
                          if not teacher_class(m.backend).returns_hidden_states]
                _require(not remote, "method.loss.kind", f"full_vocab_reverse_kl needs in-process teachers; {remote} "
                         "are servers, whose full distributions SGLang 0.5.23 cannot ship efficiently "
                         "(docs/methods.md): use topk_reverse_kl or sampled_token with them")
            if kind == "topk_reverse_kl":
                unable = [m.config.name for m in self.teachers.models if not teacher_class(m.backend).scores_topk]
                _require(not unable, "method.loss.kind", f"topk_reverse_kl needs teachers that return any top-k "
                         f"(inprocess, sglang); {unable} cannot (vLLM returns at most 20)")
                _require(self.method.routing.rule != "pool", "method.routing.rule",
                         "pool routing's target is a mixture of the teachers, whose top-k tokens differ: use "
                         "full_vocab_reverse_kl (in-process teachers) or sampled_token with it")
                if (Path(self.student.hf_path) / "config.json").is_file():
                    vocab = StudentArch.from_hf_dir(self.student.hf_path).vocab_size
                    _require(self.method.loss.topk <= vocab, "method.loss.topk",
                             f"{self.method.loss.topk} is more than the vocabulary of {self.student.hf_path} ({vocab})")
            if kind != "sampled_token":
                _require(self.train.optimizer_steps_per_update == 1, "train.optimizer_steps_per_update",
                         f"method.loss.kind {kind} supports one optimizer step per update")
        if self.logging.probe_every and self.run.mode == "opd":
            remote = [m.config.name for m in self.teachers.models
                      if not teacher_class(m.backend).returns_hidden_states]
            _require(not remote, "logging.probe_every", f"the probe needs the teachers' full-vocabulary "
                     f"distributions, which only in-process teachers give; {remote} are servers (set it to 0)")
        prompts = self.data.sampler.prompts_per_rollout * self.data.samples_per_prompt
        _require(prompts % self.train.optimizer_steps_per_update == 0, "train.optimizer_steps_per_update",
                 f"{prompts} responses per update (data.sampler.prompts_per_rollout x data.samples_per_prompt) are "
                 f"not divisible into {self.train.optimizer_steps_per_update} equal steps")

    def check_inputs(self, *, building_bank: bool = False) -> None:
        """Every model folder and input file the run reads exists here (the command lines run it, `--print-config`
        too, before anything starts); a missing one is a FieldValueError naming its key. `building_bank`: the
        injection bank is the file being written (`launch/build_injection_bank.py`), not read."""
        mode = mode_class(self.run.mode)
        _require_model(self.student.hf_path, "student.hf_path")
        _require_file(self.data.train_file, "data.train_file")
        if mode.uses_rollout and self.rollout is not None and hasattr(self.rollout.engine.config, "model_path"):
            _require_model(self.rollout.engine.config.model_path, "rollout.engine.model_path")
        if mode.distills:
            for index, model in enumerate(self.teachers.models):
                _require_model(model.config.model_path, f"teachers.models.{index}.model_path")
        if self.method.injection is not None and mode.distills and not building_bank:
            _require_file(self.method.injection.bank, "method.injection.bank")
        if self.logging.probe_every and self.run.mode == "opd":
            for index, path in enumerate(self.logging.probe.prompt_files):
                _require_file(path, f"logging.probe.prompt_files.{index}")
            if self.logging.probe.file is not None:
                _require_file(self.logging.probe.file, "logging.probe.file")
        if self.eval.every:
            if self.eval.prompts is not None:
                _require_file(self.eval.prompts, "eval.prompts")
            _require(not self.eval.suites or self.eval.data_dir.is_dir(), "eval.data_dir",
                     f"no folder {self.eval.data_dir} (prepare the suites: launch/evaluate.py prepare)")
