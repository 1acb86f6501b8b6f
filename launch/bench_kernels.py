"""Microbenchmark of the fused OPD loss through the LM head against its peers, and the CPU demo's update time.

    python launch/bench_kernels.py --device cpu --quick          # tiny shapes: native, interpreter, torch
    python launch/bench_kernels.py --device cpu                  # + the demo's shape and 4096 x 1024 x 32000
    python launch/bench_kernels.py --device cpu --demo-updates 3 --demo-only   # demo: native vs interpreter
    python launch/bench_kernels.py --device cuda                 # Qwen3.5 shapes from configs/bench

Prints a table (median ms, ratio to the 3-GEMM floor, peak extra memory, relative error against float64)
and writes bench_kernels.json and bench_kernels.md to --out. On CPU, ``dnmopd`` is the native torch path
(what CPU tensors get) and ``dnmopd[backend=triton]`` the same op in the Triton interpreter. With
--demo-updates N it also runs the CPU demo (configs/demo_cpu.yaml, `make demo`'s command) for N updates on
each backend and reports the per-update times and their ratio (bench_demo.md). The method is described in
docs/benchmarks.md and in dnmopd.benchmarks.harness / .demo_updates.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SHAPES = REPO / "configs" / "bench" / "shapes.yaml"
DEFAULT_IMPLS = {
    "cuda": "floor,floor_chunked,dnmopd,torch,torch_compile,liger,cce",
    "cpu": "floor,floor_chunked,dnmopd,dnmopd:backend=triton,torch,torch_compile",
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda",
                   help="where to run; on cpu the Triton peer runs in the interpreter (default: cuda)")
    p.add_argument("--quick", action="store_true",
                   help="fewer repeats, and only the shapes marked quick (on CPU the tiny ones)")
    p.add_argument("--shapes-file", type=Path, default=DEFAULT_SHAPES,
                   help=f"YAML shape registry with 'gpu' and 'cpu' sections (default: {DEFAULT_SHAPES})")
    p.add_argument("--shapes", default="",
                   help="comma-separated shape names from the device's section (default: all)")
    p.add_argument("--impls", default=None,
                   help="comma-separated implementations, each 'name' or 'name:key=value,...' with keys "
                        "chunk_rows=N, logits_dtype=float32, backend=auto|native|triton "
                        f"(default on cuda: {DEFAULT_IMPLS['cuda']}; on cpu: {DEFAULT_IMPLS['cpu']})")
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default=None,
                   help="input dtype (default: bfloat16 on cuda, float32 on cpu)")
    p.add_argument("--repeats", type=int, default=None, help="timed steps per implementation (default 5; quick 3)")
    p.add_argument("--time-budget", type=float, default=None,
                   help="seconds; shapes not started within it are reported as skipped (default: none)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--demo-updates", type=int, default=0,
                   help="also time N updates of the CPU demo on the native and the interpreter backend (default: off)")
    p.add_argument("--demo-set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for the demo runs, e.g. method.loss.kind=sampled_token (repeatable)")
    p.add_argument("--demo-rounds", type=int, default=1,
                   help="runs per backend, taking turns (native, triton, native, ...; default 1)")
    p.add_argument("--demo-only", action="store_true", help="skip the microbenchmark (with --demo-updates)")
    p.add_argument("--out", type=Path, default=Path("runs/bench_kernels"),
                   help="folder for bench_kernels.json / .md and bench_demo.md (default: runs/bench_kernels)")
    args = p.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        p.error("--repeats must be >= 1")
    if args.demo_rounds < 1:
        p.error("--demo-rounds must be >= 1")
    if args.demo_updates < 0 or (args.demo_only and not args.demo_updates):
        p.error("--demo-updates must be >= 1 with --demo-only (and >= 0 otherwise)")
    if args.demo_updates and args.device != "cpu":
        p.error("--demo-updates times the CPU demo: use it with --device cpu")
    return args


def run_demo(args) -> int:
    from dnmopd.benchmarks import demo_updates

    try:
        timings = demo_updates.compare(REPO, args.out.resolve(), args.demo_updates, args.demo_set, args.demo_rounds)
    except (RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    overrides = " ".join(f"--set {item}" for item in args.demo_set)
    table = (f"# Demo update time per kernel backend\n\n{args.demo_rounds} x {args.demo_updates} updates per backend "
             f"of configs/demo_cpu.yaml {overrides}, load average at the end {os.getloadavg()[0]:.1f}\n\n"
             f"{demo_updates.markdown(timings)}\n")
    path = args.out / "bench_demo.md"
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(table)
    tmp.replace(path)
    print(table)
    print(f"wrote {path}")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton: the interpreter peer
    import torch

    from dnmopd.benchmarks import host_memory
    from dnmopd.benchmarks.harness import (
        ImplSpec,
        environment,
        load_shapes,
        markdown_table,
        run,
        write_reports,
    )

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but no CUDA device is available (use --device cpu)", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype or ("bfloat16" if args.device == "cuda" else "float32"))
    section = "gpu" if args.device == "cuda" else "cpu"
    try:
        shapes = load_shapes(args.shapes_file, section, [s for s in args.shapes.split(",") if s], args.quick)
        impls = DEFAULT_IMPLS[args.device] if args.impls is None else args.impls
        specs = [ImplSpec.parse(s) for s in impls.split(",") if s]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.demo_only:
        return run_demo(args)
    host_reason = host_memory.track_freed_memory() if device.type == "cpu" else None
    repeats = args.repeats or (3 if args.quick else 5)
    meta = {**environment(device), "dtype": str(dtype), "repeats": repeats, "impls": [s.label for s in specs]}
    if device.type == "cpu":
        meta["host_memory"] = host_reason or "resident-set high-water mark"
    done = []

    def progress(result):
        done.append(result)
        ms = "-" if result.median_ms is None else f"{result.median_ms:.2f} ms"
        print(f"[bench] {result.shape} {result.impl}: {result.status} {ms} {result.reason}", flush=True)
        write_reports(done, meta, args.out)

    results = run(shapes, specs, device, dtype, repeats, seed=args.seed, time_budget_s=args.time_budget,
                  on_result=progress, host_tracked=device.type == "cpu" and host_reason is None)
    json_path, md_path = write_reports(results, meta, args.out)
    print(markdown_table(results))
    print(f"wrote {json_path} and {md_path}")
    code = 0 if any(r.status == "ok" for r in results) else 1
    if args.demo_updates:
        code = run_demo(args) or code
    return code


if __name__ == "__main__":
    sys.exit(main())
