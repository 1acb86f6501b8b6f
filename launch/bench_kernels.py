"""Microbenchmark of the fused OPD loss through the LM head against its peers.

    python launch/bench_kernels.py --device cpu --quick          # tiny shapes, Triton interpreter
    python launch/bench_kernels.py --device cuda                  # Qwen3.5 shapes from configs/bench

Prints a table (median ms, ratio to the cuBLAS 3-GEMM floor, peak extra memory, relative error against
float64) and writes bench_kernels.json and bench_kernels.md to --out. The method is described in
docs/benchmarks.md and in dnmopd.kernels.benchmarks.harness.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_SHAPES = Path(__file__).resolve().parent.parent / "configs" / "bench" / "shapes.yaml"
DEFAULT_IMPLS = "floor,floor_chunked,dnmopd,torch,torch_compile,liger,cce"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda",
                   help="where to run; cpu runs the Triton kernels in interpreter mode (default: cuda)")
    p.add_argument("--quick", action="store_true",
                   help="fewer repeats (and on CPU the tiny shapes only, which is all the cpu section has)")
    p.add_argument("--shapes-file", type=Path, default=DEFAULT_SHAPES,
                   help=f"YAML shape registry with 'gpu' and 'cpu' sections (default: {DEFAULT_SHAPES})")
    p.add_argument("--shapes", default="",
                   help="comma-separated shape names from the device's section (default: all)")
    p.add_argument("--impls", default=DEFAULT_IMPLS,
                   help="comma-separated implementations, each 'name' or 'name:chunk_rows=N' / "
                        f"'name:logits_dtype=float32' (default: {DEFAULT_IMPLS})")
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default=None,
                   help="input dtype (default: bfloat16 on cuda, float32 on cpu)")
    p.add_argument("--repeats", type=int, default=None, help="timed steps per implementation (default 5; quick 3)")
    p.add_argument("--time-budget", type=float, default=None,
                   help="seconds; shapes not started within it are reported as skipped (default: none)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--out", type=Path, default=Path("runs/bench_kernels"),
                   help="folder for bench_kernels.json / .md (default: runs/bench_kernels)")
    args = p.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        p.error("--repeats must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
    import torch
    from dnmopd.kernels.benchmarks.harness import (
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
        shapes = load_shapes(args.shapes_file, section, [s for s in args.shapes.split(",") if s])
        specs = [ImplSpec.parse(s) for s in args.impls.split(",") if s]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    repeats = args.repeats or (3 if args.quick else 5)
    meta = {**environment(device), "dtype": str(dtype), "repeats": repeats, "impls": [s.label for s in specs]}
    done = []

    def progress(result):
        done.append(result)
        ms = "-" if result.median_ms is None else f"{result.median_ms:.2f} ms"
        print(f"[bench] {result.shape} {result.impl}: {result.status} {ms} {result.reason}", flush=True)
        write_reports(done, meta, args.out)

    results = run(shapes, specs, device, dtype, repeats, seed=args.seed, time_budget_s=args.time_budget,
                  on_result=progress)
    json_path, md_path = write_reports(results, meta, args.out)
    print(markdown_table(results))
    print(f"wrote {json_path} and {md_path}")
    return 0 if any(r.status == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
