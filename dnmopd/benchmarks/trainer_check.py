"""The trainer end to end on one device, for `launch/gpu_check.py` (its trainer section): DN-MOPD through
launch/pretrain_dnmopd.py on configs/demo_cpu.yaml, shrunk to a few prompts, with checks that each have a
reference independent of the run they check.

Four runs of the same command line, each a child process:

    main                2 updates with Adam, the in-process rollout engine and teachers on the device, a checkpoint
                        after each
    resumed             a copy of `main` without its second update, resumed from the checkpoint of update 1: it must
                        repeat update 2 (metrics and released weights, RESUME_TOLERANCE)
    device_cpu_engines  1 update of the student on the device with the engines and teachers on the CPU, so that it
                        samples the same responses as
    cpu_reference       the same update with no GPU visible: equal metrics and weight change (CPU_TOLERANCE,
                        CPU_WEIGHT_TOLERANCE)

`main`'s release is reloaded in transformers on the device and on the CPU (RELOAD_TOLERANCE). The last two runs use
SGD: one update's weight change is then lr x the clipped gradient, comparable element by element across devices
(Adam's first step, about lr x sign(gradient), turns rounding noise into lr-sized differences).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dnmopd.benchmarks.gpu_report import RowLog
from dnmopd.benchmarks.paper_batch import PRESETS, QWEN35_VOCAB

SIZES = {  # per update: prompts x samples, new tokens; packed micro-batches of at most these tokens; the lr
    "tiny": {"prompts": 3, "samples": 2, "new_tokens": 8, "micro_batch_tokens": 256, "lr": 1e-3},
    "full": {"prompts": 4, "samples": 2, "new_tokens": 16, "micro_batch_tokens": 512, "lr": 1e-4},
}
ENGINE_LOGPROB_TOLERANCE = 2e-2
"""Mean |log p trainer - log p rollout engine| per response token, both float32 (the CPU demo: about 1e-6; FLA's
kernels in the engine take float32 dots in TF32, about 1e-3 here; a wrong weight sync or mask gives 0.1 and more)."""
RESUME_TOLERANCE = 1e-5
"""Relative difference of the resumed run's second update (metrics, weights) from the uninterrupted run's."""
CPU_TOLERANCE = 5e-3
"""Relative difference of one update's metrics on the device from the same update on the CPU (float32, cuBLAS and
cuDNN without TF32; FLA's kernels, where the student trains through them, with it)."""
CPU_WEIGHT_TOLERANCE = 1e-2
"""max |w_device - w_cpu| after one update, relative to the update's largest weight change on the CPU."""
RELOAD_TOLERANCE = 1e-2
"""max |logit| difference of the release in transformers on the device vs on the CPU, relative to the max |logit|
(transformers takes FLA's kernels, with TF32 dots, on a GPU where FLA is importable)."""
WALL_CLOCK = ("time", "timeline/", "throughput/")
NOISE_METRICS = ("train_rollout_logprob_abs_diff",)
"""Engine-vs-trainer numerics, noise-sized by design: judged alone (ENGINE_LOGPROB_TOLERANCE), not across runs."""
PHASES = ("rollout", "scoring", "wait", "train", "sync")


def build_models(root: Path, tiny: bool) -> tuple[Path, dict[str, Path]]:
    """The student and the teachers by name: the CPU demo's (tiny), or random Qwen3.5s with the real 2B layer shapes,
    4 layers (3 Gated DeltaNet + 1 attention), the real vocabulary and tied embeddings, as the 2B (one teacher folder
    serves every domain). Built once per folder."""
    from dnmopd.examples.demo_models import DOMAINS, build_demo_models

    if tiny:
        root = build_demo_models(root)
        return root / "student", {f"{d}_teacher": root / f"{d}_teacher" for d in DOMAINS}
    from dnmopd.examples.tiny import build_tiny_hf_checkpoint
    from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

    student, teacher = root / "student", root / "teacher"
    if not (root / "complete").is_file():
        tokenizer = build_tiny_tokenizer(root / "tokenizer", flavor="qwen3.5")
        shape = dict(arch="qwen3_5", vocab_size=QWEN35_VOCAB, num_layers=4, tie_word_embeddings=True,
                     tokenizer_dir=tokenizer, overrides=PRESETS["qwen3.5-2b"])
        build_tiny_hf_checkpoint(student, seed=0, **shape)
        build_tiny_hf_checkpoint(teacher, seed=1, **shape)
        (root / "complete").write_text("")
    return student, {f"{d}_teacher": teacher for d in DOMAINS}


def parameter_count(folder: Path) -> int:
    from safetensors import safe_open

    count = 0
    for file in folder.glob("*.safetensors"):
        with safe_open(file, framework="pt") as handle:
            count += sum(math.prod(handle.get_slice(name).get_shape()) for name in handle.keys())  # noqa: SIM118
    return count


class TrainerRun:
    """One training run (`what` it is) in a child process, its output in <run>.log beside the run folder."""

    def __init__(self, command: list[str], run_dir: Path, engines: str, what: str, *, cwd: Path,
                 cpu_only: bool = False):
        self.run_dir, self.engines, self.what, self.started = run_dir, engines, what, time.monotonic()
        self.ok: bool | None = None
        env = dict(os.environ)
        if engines == "cpu":  # two such runs share the CPU
            env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // 2)))
        if cpu_only:
            env["CUDA_VISIBLE_DEVICES"] = ""
        env["NVIDIA_TF32_OVERRIDE"] = "0"  # float32 in cuBLAS and cuDNN (convolutions allow TF32 by default)
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = run_dir.with_suffix(".log")
        with open(self.log_path, "w", encoding="utf-8") as log:
            self.proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)

    def finish(self, log: RowLog) -> bool:
        """Wait for the run and report it (once); whether it succeeded."""
        if self.ok is None:
            code = self.proc.wait()
            seconds = round(time.monotonic() - self.started, 1)
            output = self.output
            print(f"----- {self.run_dir.name} ({self.what}): exit {code} after {seconds} s; its last lines:\n"
                  + "\n".join(output.splitlines()[-40:]), flush=True)
            self.ok = code == 0
            log.expect(f"run {self.run_dir.name}: {self.what}", self.ok, seconds,
                       note="seconds until collected" if self.ok else f"exit {code}: {output[-1200:]}")
        return self.ok

    def metrics(self) -> list[dict]:
        return [json.loads(line) for line in (self.run_dir / "metrics.jsonl").read_text().splitlines()]

    @property
    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


@dataclass
class TrainerCheck:
    repo: Path
    """The checkout: launch/pretrain_dnmopd.py and configs/demo_cpu.yaml."""
    root: Path
    """This check's folder (runs, logs); the models are built in its parent's `trainer_models`."""
    device: str
    tiny: bool
    tensor: int = 1
    pipeline: int = 1

    def command(self, models, run_dir: Path, *, updates: int, engines: str, optimizer: str) -> list[str]:
        student, teachers = models
        size = SIZES["tiny" if self.tiny else "full"]
        listing = ", ".join(f"{{backend: inprocess, name: {name}, model_path: {path}, device: {engines}}}"
                            for name, path in teachers.items())
        overrides = [
            f"run.name={run_dir.name}", f"run.output_dir={run_dir.parent}", f"student.hf_path={student}",
            "student.dtype=float32", f"rollout.engine.model_path={student}", f"rollout.engine.device={engines}",
            f"teachers.models=[{listing}]", f"train.updates={updates}",
            f"train.micro_batch_tokens={size['micro_batch_tokens']}", f"data.sampler.prompts_per_rollout="
            f"{size['prompts']}", f"data.samples_per_prompt={size['samples']}",
            f"rollout.sampling.max_new_tokens={size['new_tokens']}", "checkpoint.save_every=1",
            "checkpoint.keep_last=0", "logging.progress=false", "logging.report=false",
            "logging.metrics.tensorboard=false", "logging.probe_every=0", f"optimizer.name={optimizer}",
            f"optimizer.lr={size['lr']}", "optimizer.lr_warmup_updates=0", "optimizer.lr_decay_style=constant",
            f"parallel.tensor={self.tensor}", f"parallel.pipeline={self.pipeline}",
        ]
        processes = self.tensor * self.pipeline
        launcher = [sys.executable] if processes == 1 else \
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
        return [*launcher, str(self.repo / "launch" / "pretrain_dnmopd.py"), "--config",
                str(self.repo / "configs" / "demo_cpu.yaml"), *[arg for item in overrides for arg in ("--set", item)]]

    def run(self, log: RowLog) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        tick = time.monotonic()
        models = build_models(self.root.parent / "trainer_models" / ("tiny" if self.tiny else "full"), self.tiny)
        student = models[0]
        config = json.loads((student / "config.json").read_text())
        log.info("student", f"{config['num_hidden_layers']} layers, hidden {config['hidden_size']}, vocab "
                            f"{config['vocab_size']:,}",
                 note=f"{parameter_count(student):,} parameters, tied embeddings {config['tie_word_embeddings']}, "
                      f"TP {self.tensor} PP {self.pipeline}; models ready in {time.monotonic() - tick:.0f} s")
        runs, device = self.root / "runs", self.device

        def start(name, updates, engines, what, optimizer="adam", cpu_only=False):
            command = self.command(models, runs / name, updates=updates, engines=engines, optimizer=optimizer)
            return TrainerRun(command, runs / name, engines, what, cwd=self.repo, cpu_only=cpu_only)

        # the two SGD runs of the CPU comparison, mostly CPU work, run beside the device's runs on a GPU machine and
        # before them on a CPU (where running them together only slows each down)
        comparison = []
        for name, what in (("cpu_reference", "1 update on the CPU (the reference), SGD"),
                           ("device_cpu_engines", f"1 update on {device}, engines and teachers on the CPU, SGD")):
            comparison.append(start(name, 1, "cpu", what, "sgd", cpu_only=name == "cpu_reference"))
            if device != "cuda":
                comparison[-1].finish(log)
        try:
            main = start("main", 2, device, f"2 updates on {device}, in-process engines and teachers on {device}")
            if main.finish(log):
                shutil.rmtree(main.run_dir / "checkpoints" / "iter_0000002", ignore_errors=True)  # GBs at full size
                with log.guard("updates of the main run"):
                    update_checks(main.metrics(), log)
                with log.guard("checkpoint + exact resume"):
                    resume_checks(main, start, log)
                for run in ("main", "resumed"):
                    shutil.rmtree(runs / run / "checkpoints", ignore_errors=True)
                with log.guard("release reloaded in transformers"):
                    release_checks(main.run_dir / "release", student, device, log)
        finally:
            finished = [run.finish(log) for run in comparison]
        for run in comparison:
            shutil.rmtree(run.run_dir / "checkpoints", ignore_errors=True)
        if all(finished):
            reference, engines_on_cpu = comparison
            with log.guard("CPU path, same seed"):
                cpu_path_checks(engines_on_cpu, reference, student, device, log)


def update_checks(records: list[dict], log: RowLog) -> None:
    """Each update's loss and gradient norm finite, the trainer's log-probs the engine's; the last update's phases."""
    for record in records:
        update = record["step"] + 1
        finite = all(isinstance(record.get(k), int | float) and math.isfinite(record[k]) for k in ("loss", "grad_norm"))
        log.expect(f"update {update}: loss and gradient norm finite", finite, record.get("loss"),
                   note=f"loss; grad norm {record.get('grad_norm')}")
        log.judge(f"update {update}: mean |log p trainer - log p rollout engine|",
                  record.get("train_rollout_logprob_abs_diff"), ENGINE_LOGPROB_TOLERANCE)
    last = records[-1]
    for phase in PHASES:
        if f"time/{phase}" in last:
            log.info(f"update {last['step'] + 1} phase: {phase} (s)", round(last[f"time/{phase}"], 3))
    log.info(f"update {last['step'] + 1}: response tokens/s", round(last["throughput/tokens_per_s"], 1),
             note=f"{last['response_tokens']:.0f} response tokens in the update")


def resume_checks(main: TrainerRun, start, log: RowLog) -> None:
    """A copy of the main run without its second update (the checkpoint of update 1 linked, not copied; the second
    one is deleted already) resumes and must repeat update 2: the same metrics and the same released weights."""
    resumed_dir = main.run_dir.parent / "resumed"

    def copy(source, target):  # the resumed run only reads the checkpoint's files
        (os.link if f"{os.sep}checkpoints{os.sep}" in source else shutil.copy2)(source, target)

    shutil.copytree(main.run_dir, resumed_dir, copy_function=copy, ignore=shutil.ignore_patterns("release"))
    resumed = start("resumed", 2, main.engines, "the main run resumed from its checkpoint of update 1")
    if not resumed.finish(log):
        return
    log.expect("resumed from the checkpoint of update 1", "(update 1)" in resumed.output)
    difference, key = metric_difference(resumed.metrics()[1], main.metrics()[1])
    log.judge("exact resume: update 2 metrics, max relative difference", difference, RESUME_TOLERANCE,
              note=f"worst: {key or '-'}")
    difference, note = weight_difference(release_weights(resumed_dir / "release"),
                                         release_weights(main.run_dir / "release"))
    log.judge("exact resume: released weights, max |difference| / max |weight|", difference, RESUME_TOLERANCE,
              note=note)


def release_checks(release: Path, student: Path, device: str, log: RowLog) -> None:
    difference, note = weight_difference(release_weights(release), release_weights(student))
    log.expect("release: weights trained (differ from the initial student)", 0 < difference < math.inf, difference,
               note=f"max |difference| / max |weight|; {note}")
    on_device, on_cpu = release_logits(release, device), release_logits(release, "cpu")
    finite = bool(on_device.isfinite().all())
    value = ((on_device - on_cpu).abs().max() / on_cpu.abs().max()).item() if finite else math.nan
    log.judge(f"release reloaded in transformers: logits on {device} vs CPU, max rel difference", value,
              RELOAD_TOLERANCE, note=f"float32, 96 tokens; finite: {finite}")


def cpu_path_checks(device_run: TrainerRun, reference: TrainerRun, student: Path, device: str, log: RowLog) -> None:
    mine, theirs = device_run.metrics()[0], reference.metrics()[0]
    same_tokens = all(mine.get(k) == theirs.get(k) for k in ("response_tokens", "response_length/mean"))
    log.expect("CPU path, same seed: the same sampled responses", same_tokens, mine.get("response_tokens"),
               note="response tokens and mean length equal")
    difference, key = metric_difference(mine, theirs)
    log.judge(f"CPU path, same seed: update 1 metrics on {device} vs CPU, max rel difference", difference,
              CPU_TOLERANCE, note=f"worst: {key or '-'}; {len(stable_metrics(theirs))} metrics")
    difference, note = weight_difference(release_weights(device_run.run_dir / "release"),
                                         release_weights(reference.run_dir / "release"), release_weights(student))
    log.judge(f"CPU path, same seed: weights after update 1 on {device} vs CPU", difference, CPU_WEIGHT_TOLERANCE,
              note=f"max |w_{device} - w_cpu| / max |w_cpu - w_initial|; {note}")


def stable_metrics(record: dict) -> dict[str, float]:
    """A metrics record without its step, wall-clock measurements (times, throughput, latencies) and NOISE_METRICS."""
    return {k: v for k, v in record.items() if k != "step" and k not in NOISE_METRICS
            and not k.startswith(WALL_CLOCK) and not k.endswith("latency_s")}


def metric_difference(a: dict, b: dict) -> tuple[float, str]:
    """The largest |a - b| / max(|a|, |b|, 1e-6) over the stable metrics, and its key."""
    a, b = stable_metrics(a), stable_metrics(b)
    worst, where = 0.0, ""
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            return math.inf, f"{key} in one run only"
        difference = abs(a[key] - b[key]) / max(abs(a[key]), abs(b[key]), 1e-6)
        if math.isnan(difference):
            return math.nan, key
        if difference > worst:
            worst, where = difference, key
    return worst, where


def release_weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    weights = {}
    for file in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(file))
    if not weights:
        raise FileNotFoundError(f"{folder}: no *.safetensors files")
    return weights


def weight_difference(a: dict, b: dict, reference: dict | None = None) -> tuple[float, str]:
    """max |a - b| over the tensors both have, divided by max |b| (or by max |b - reference|), and a note naming the
    tensors only one side has."""
    common = sorted(set(a) & set(b) & (set(b) if reference is None else set(reference)))
    if not common:
        return math.inf, "no tensor names in common"
    difference = max((a[n].float() - b[n].float()).abs().max().item() for n in common)
    if reference is None:
        scale = max(b[n].float().abs().max().item() for n in common)
    else:
        scale = max((b[n].float() - reference[n].float()).abs().max().item() for n in common)
    only = sorted(set(a) ^ set(b))
    note = f"{len(common)} tensors" + (f"; only in one: {only[:6]}" if only else "")
    return (difference / scale if scale > 0 else math.inf), note


def release_logits(folder: Path, device: str):
    import torch

    from dnmopd.hf.models import load_causal_lm

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # float32 means float32
    model = load_causal_lm(str(folder), device=device, dtype="float32", attn_implementation="sdpa")
    ids = torch.randint(0, model.config.vocab_size, (1, 96), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(ids.to(device)).logits.float().cpu()
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return logits
