"""Padded vs packed micro-batches of the student at the paper's length mix.

    python launch/bench_student.py                                    # token accounting + timing on 1 process
    torchrun --nproc_per_node 2 launch/bench_student.py --pipeline 2   # timing at PP 2 (accounting as well)
    python launch/bench_student.py --no-timing                        # token accounting only

The batch (reference-behavior 9.2: the 4B student's first batch): 64 prompts x 8 responses, the prompts in equal
thirds math / code / IF (the student set has 900 of each); response lengths drawn per domain from a gamma
distribution of shape --gamma-shape whose mean after capping at --cap is the domain's mean (math 4,600, code 5,200,
IF 111 tokens), then capped; prompt lengths from a gamma of shape 2 and mean --prompt-mean, capped at 1,228 (the
longest prompt of the paper's data). 9.2 gives the means, not how many responses hit the cap: the gamma shape sets
that (printed; shape 2 puts about a sixth of math and a quarter of code responses at an 8K cap).

Printed, padded vs packed, for the micro-batches the trainer runs at each PP size of --accounting-pipelines
(padded: longest-first buckets at PP 1, every micro-batch padded to the batch's longest sequence at PP > 1;
packed: balanced packs of the real tokens): micro-batches, tokens computed, their ratio to the real tokens, the
padding fraction. Then, at this process group's layout, the student's forward+backward over the whole batch
through megatron's schedules (the loss: a fixed projection of the final hidden states at the response positions,
so the LM head is not part of it): padded and packed alternately in one run after a warm-up pass of each over 4
prompts, the median of --repeats each and their ratio (wall-clock, and the CPU seconds of all stages, which a
shared machine disturbs less), and the peak activation memory (bytes of the tensors autograd holds for the
backward, on the busiest pipeline stage; on CUDA also the peak allocated memory). A CPU run scales every length,
the cap and the micro-batch budget by --length-scale.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import weakref
from pathlib import Path

import torch

from dnmopd.benchmarks.paper_batch import GAMMA_SHAPE, PRESETS, PROMPT_MEAN, RESPONSE_CAP, LengthMix


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=64, help="prompts per batch (default 64, the paper's)")
    p.add_argument("--samples", type=int, default=8, help="responses per prompt (default 8, the paper's)")
    p.add_argument("--cap", type=int, default=RESPONSE_CAP, help="response length cap (default 8192; the paper's 8K)")
    p.add_argument("--gamma-shape", type=float, default=GAMMA_SHAPE,
                   help="shape of the response-length gamma (default 2)")
    p.add_argument("--prompt-mean", type=float, default=PROMPT_MEAN, help="mean prompt length in tokens (default 300)")
    p.add_argument("--micro-batch-tokens", type=int, default=16384,
                   help="train.micro_batch_tokens at full scale (default 16384, the recipes')")
    p.add_argument("--accounting-pipelines", default="1,2,4", help="PP sizes of the token accounting (1,2,4)")
    p.add_argument("--no-timing", action="store_true", help="token accounting only (no model)")
    p.add_argument("--length-scale", type=float, default=None,
                   help="timing only: multiply every length, the cap and the micro-batch budget by this "
                        "(default 1 on CUDA, 0.125 on CPU)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny",
                   help="random Qwen3.5 student to time: tiny (hidden 64) or the real 2B layer shapes")
    p.add_argument("--layers", type=int, default=4, help="layers of the timed student (3 GDN : 1 attention)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default=None,
                   help="student dtype (default: bfloat16 on CUDA, float32 on CPU)")
    p.add_argument("--tensor", type=int, default=1, help="tensor-parallel size of the timed layout")
    p.add_argument("--pipeline", type=int, default=1, help="pipeline-parallel size of the timed layout")
    p.add_argument("--virtual-pipeline", type=int, default=None, help="model chunks per pipeline rank")
    p.add_argument("--repeats", type=int, default=2,
                   help="timed passes of each layout over the whole batch, after a warm-up on 4 prompts (2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the lengths and tokens (default 0)")
    p.add_argument("--out", type=Path, default=Path("runs/bench_student"),
                   help="folder for bench_student.json (default: runs/bench_student)")
    args = p.parse_args(argv)
    for name in ("prompts", "samples", "cap", "micro_batch_tokens", "repeats", "layers"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.gamma_shape <= 0 or args.prompt_mean <= 0 or (args.length_scale is not None and args.length_scale <= 0):
        p.error("--gamma-shape, --prompt-mean and --length-scale must be > 0")
    return args


def draw_mix(args, scale: float = 1.0) -> LengthMix:
    return LengthMix.draw(args.prompts, args.samples, cap=args.cap, gamma_shape=args.gamma_shape,
                          prompt_mean=args.prompt_mean, seed=args.seed, scale=scale)


# ------------------------------------------------------------------------------------------------ accounting
def accounting(batch, max_tokens: int, pipelines: list[int]) -> list[dict]:
    """Tokens the model computes for `batch`, padded vs packed, at each pipeline size (no virtual stages)."""
    from dnmopd.trainer.step.forward_backward import split_micro_batches

    real = int(batch.sequence_lens.sum())
    rows = []
    for pipeline in pipelines:
        for packing in (False, True):
            micro = split_micro_batches(batch, max_tokens, packing=packing, pipeline=pipeline)
            tokens = [mb.num_tokens for mb in micro]
            rows.append({"pipeline": pipeline, "layout": "packed" if packing else "padded",
                         "micro_batches": len(micro), "tokens": sum(tokens), "ratio": sum(tokens) / real,
                         "padding": 1 - real / sum(tokens), "largest": max(tokens), "smallest": min(tokens)})
    return rows


# ------------------------------------------------------------------------------------------------ timing
class ActivationMemory:
    """Peak bytes of the storages autograd holds for the backward pass (parameters excluded), while active."""

    def __init__(self, parameters):
        self.parameter_storages = {p.untyped_storage().data_ptr() for p in parameters}
        self.live: dict[int, list[int]] = {}  # storage address -> [bytes, saved tensors referring to it]
        self.current = self.peak = 0

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key in self.parameter_storages or storage.nbytes() == 0:
            return tensor
        entry = self.live.setdefault(key, [storage.nbytes(), 0])
        if entry[1] == 0:
            self.current += entry[0]
            self.peak = max(self.peak, self.current)
        entry[1] += 1
        weakref.finalize(tensor, self._release, key)
        return tensor

    def _release(self, key: int) -> None:
        entry = self.live[key]
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.live[key]

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)


def hidden_projection_loss(direction: torch.Tensor):
    """A per-micro-batch loss that reaches every layer but not the LM head: <hidden, direction> summed."""
    def loss_fn(mb, tokens):
        return (tokens.hidden.float() @ direction).sum(), {"rows": tokens.rows}
    return loss_fn


def time_student(args, batch, student, max_tokens: int) -> dict:
    """Forward+backward of the whole batch, padded and packed alternately; medians, their ratio, peak memory."""
    import torch.distributed as dist

    from dnmopd.trainer.step.forward_backward import StudentForward

    device = next(student.chunks[0].parameters()).device
    direction = torch.randn(student.arch.hidden_size, generator=torch.Generator().manual_seed(1)).to(device)
    loss_fn = hidden_projection_loss(direction)
    parameters = [p for chunk in student.chunks for p in chunk.parameters()]
    for chunk in student.chunks:
        chunk.train()
    results = {}
    for packing in (False, True):
        micro = StudentForward(student, student.chunks, max_tokens, packing=packing).micro_batches(batch)
        results[packing] = {"seconds": [], "cpu_seconds": [], "activation_bytes": 0, "cuda_peak_bytes": None,
                            "micro_batches": len(micro), "tokens": sum(mb.num_tokens for mb in micro),
                            "largest_micro_batch": max(mb.num_tokens for mb in micro)}
    warm_up = batch.select(slice(0, 4 * args.samples))  # first-call costs (lazy imports, allocator) off the clock
    for repeat in range(args.repeats + 1):
        for packing in (False, True):
            forward = StudentForward(student, student.chunks, max_tokens, packing=packing)
            memory = ActivationMemory(parameters)
            for param in parameters:
                param.grad = None
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
            dist.barrier()
            start, cpu_start = time.perf_counter(), time.process_time()
            with memory.hooks():
                forward.run(batch if repeat else warm_up, loss_fn, forward_only=False)
            if device.type == "cuda":
                torch.cuda.synchronize()
            cpu = torch.tensor(time.process_time() - cpu_start, dtype=torch.float64)
            dist.barrier()
            elapsed = time.perf_counter() - start
            dist.all_reduce(cpu)  # CPU seconds of all stages (gloo: a CPU tensor)
            result = results[packing]
            if repeat:
                result["seconds"].append(elapsed)
                result["cpu_seconds"].append(cpu.item())
                result["activation_bytes"] = max(result["activation_bytes"], memory.peak)
                if device.type == "cuda":
                    result["cuda_peak_bytes"] = torch.cuda.max_memory_allocated() - before
    for result in results.values():  # the busiest pipeline stage
        for key in ("activation_bytes", "cuda_peak_bytes"):
            if result[key] is not None:
                value = torch.tensor(float(result[key]), device=device)
                dist.all_reduce(value, op=dist.ReduceOp.MAX)
                result[key] = int(value.item())
        result["median_s"] = statistics.median(result["seconds"])
        result["median_cpu_s"] = statistics.median(result["cpu_seconds"])
    padded, packed = results[False], results[True]
    return {"padded": padded, "packed": packed,
            "time_ratio_packed_over_padded": packed["median_s"] / padded["median_s"],
            "cpu_time_ratio_packed_over_padded": packed["median_cpu_s"] / padded["median_cpu_s"],
            "activation_ratio_packed_over_padded": packed["activation_bytes"] / max(padded["activation_bytes"], 1)}


def build_student(args, work: Path):
    """The random student (built by rank 0 into `work`, a folder every rank sees) at the timed layout."""
    from dnmopd.examples.tiny import build_tiny_hf_checkpoint
    from dnmopd.student import BuildOptions, ParallelDims, Student

    on_gpu = torch.cuda.is_available()
    dtype = args.dtype or ("bfloat16" if on_gpu else "float32")
    path = work / f"student-{args.preset}"
    if torch.distributed.get_rank() == 0:
        build_tiny_hf_checkpoint(path, arch="qwen3_5", vocab_size=1024, seed=0, num_layers=args.layers,
                                 dtype=dtype, overrides=PRESETS[args.preset])
    torch.distributed.barrier()
    dims = ParallelDims.Config(tensor=args.tensor, pipeline=args.pipeline,
                               virtual_pipeline=args.virtual_pipeline).build()
    return Student.from_hf(path, dims, BuildOptions(dtype=dtype))


# ------------------------------------------------------------------------------------------------ report
def _table(rows: list[dict]) -> str:
    lines = ["| PP | micro-batches | layout | tokens computed | x real tokens | padding | largest / smallest |",
             "|---:|---:|---|---:|---:|---:|---:|"]
    lines += [f"| {r['pipeline']} | {r['micro_batches']} | {r['layout']} | {r['tokens']:,} | {r['ratio']:.3f} | "
              f"{r['padding']:.1%} | {r['largest']:,} / {r['smallest']:,} |" for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch.distributed as dist

    from dnmopd.io import atomic_write
    from dnmopd.student import init_distributed
    from dnmopd.student.cpu_compat import cpu_compat

    mix = draw_mix(args)
    report = {"args": {k: str(v) for k, v in vars(args).items()}, "mix": mix.summary()}
    if not args.no_timing:  # the accounting needs no process group
        init_distributed()
    rank0 = args.no_timing or dist.get_rank() == 0
    if rank0:
        print(json.dumps(report["mix"], indent=1), flush=True)
        pipelines = [int(p) for p in args.accounting_pipelines.split(",")]
        report["accounting"] = accounting(mix.train_batch(1024, args.seed), args.micro_batch_tokens, pipelines)
        print(f"\nTokens computed, {args.prompts * args.samples} responses, cap {args.cap}, "
              f"micro_batch_tokens {args.micro_batch_tokens}:\n{_table(report['accounting'])}", flush=True)
    if not args.no_timing:
        scale = args.length_scale or (1.0 if torch.cuda.is_available() else 0.125)
        work = [tempfile.mkdtemp(prefix="bench_student_") if rank0 else None]
        dist.broadcast_object_list(work, src=0)
        work = Path(work[0])
        with cpu_compat():
            try:
                student = build_student(args, work)
                timed = draw_mix(args, scale)
                max_tokens = max(1, round(args.micro_batch_tokens * scale))
                report["timing"] = {"length_scale": scale, "micro_batch_tokens": max_tokens,
                                    "real_tokens": timed.summary()["real_tokens"], "preset": args.preset,
                                    "layers": args.layers, "tensor": args.tensor, "pipeline": args.pipeline,
                                    "virtual_pipeline": args.virtual_pipeline,
                                    "device": str(next(student.chunks[0].parameters()).device),
                                    **time_student(args, timed.train_batch(1024, args.seed), student, max_tokens)}
                student.dims.destroy()
            finally:
                dist.barrier()
                if rank0:
                    shutil.rmtree(work, ignore_errors=True)
        if rank0:
            t = report["timing"]
            print(f"\nForward+backward, TP {args.tensor} PP {args.pipeline} VPP {args.virtual_pipeline or 1}, "
                  f"lengths x{scale}, {t['real_tokens']:,} real tokens, micro_batch_tokens {max_tokens}:")
            for layout in ("padded", "packed"):
                r = t[layout]
                cuda = "" if r["cuda_peak_bytes"] is None else f", CUDA peak {r['cuda_peak_bytes'] / 2**20:,.0f} MiB"
                print(f"  {layout}: {r['micro_batches']} micro-batches (largest {r['largest_micro_batch']:,} tokens), "
                      f"{r['tokens']:,} tokens, wall median {r['median_s']:.2f} s of "
                      f"{[round(s, 2) for s in r['seconds']]}, CPU median {r['median_cpu_s']:.2f} s of "
                      f"{[round(s, 2) for s in r['cpu_seconds']]}, activations "
                      f"{r['activation_bytes'] / 2**20:,.1f} MiB{cuda}")
            print(f"  packed / padded: wall time {t['time_ratio_packed_over_padded']:.3f}, CPU time "
                  f"{t['cpu_time_ratio_packed_over_padded']:.3f}, activation memory "
                  f"{t['activation_ratio_packed_over_padded']:.3f}", flush=True)
    if rank0:
        with atomic_write(args.out / "bench_student.json") as f:
            json.dump(report, f, indent=1)
    if not args.no_timing:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
