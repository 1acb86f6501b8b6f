"""Weight-space merge of Hugging Face folders (the paper's ParamMerge-Avg / ParamMerge-TA baselines).

    python launch/merge_checkpoints.py --method average --experts MATH CODE IF --output releases/avg
    python launch/merge_checkpoints.py --method task_arithmetic --base Qwen3.5-2B --experts MATH CODE IF \
        --output releases/ta [--lam 1.0] [--max-shard-size 4800MB]

Tensor by tensor, on the CPU, without megatron (`dnmopd.hf.merge`); the output is a Hugging Face folder with a
model card, written atomically.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def parse_args(argv=None) -> argparse.Namespace:
    from dnmopd.hf.merge import DEFAULT_MAX_SHARD_BYTES, METHODS
    from dnmopd.io import parse_byte_size

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", choices=METHODS, required=True, help="uniform average or task arithmetic")
    parser.add_argument("--experts", type=Path, nargs="+", required=True, help="HF folders of the experts (>= 2)")
    parser.add_argument("--base", type=Path, help="HF folder of the base model (required by task_arithmetic)")
    parser.add_argument("--lam", type=float, help="task_arithmetic scale lambda (default 1.0; not 1/K)")
    parser.add_argument("--output", type=Path, required=True, help="folder to create (replaced if it exists)")
    parser.add_argument("--max-shard-size", type=parse_byte_size, default=DEFAULT_MAX_SHARD_BYTES,
                        help=f"largest safetensors shard (default {DEFAULT_MAX_SHARD_BYTES // 10**6}MB)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    from dnmopd.hf.merge import CheckpointMerge

    args = parse_args(argv)
    try:
        config = CheckpointMerge.Config(method=args.method, experts=[str(p) for p in args.experts],
                                        base=str(args.base) if args.base else None, lam=args.lam,
                                        max_shard_bytes=args.max_shard_size)
        config.build().write(args.output)
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(f"merge failed: {error}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
