"""Convert between the student's training checkpoints and Hugging Face folders.

Training checkpoint (megatron-core distributed checkpoint, saved at any TP/PP) -> release folder:

    python launch/convert_to_hf.py --checkpoint runs/x/checkpoints/iter_0000080 --output releases/x \
        [--tokenizer DIR] [--base-model DIR] [--base-model-id Qwen/Qwen3.5-4B] [--license apache-2.0] \
        [--name NAME] [--training-config runs/x/config.yaml] [--metrics final.json]

A run checkpoint (`iter_*`, holding `model/`) takes its training config and final metrics from its run
directory unless --training-config / --metrics are given.

Hugging Face folder -> student checkpoint (the megatron distributed checkpoint `Student.from_checkpoint` loads at
any TP/PP; a training run itself starts from the Hugging Face folder, `student.hf_path`):

    python launch/convert_to_hf.py --from-hf Qwen3.5-2B --output checkpoints/qwen3.5-2b [--dtype bfloat16]

Runs as one process by default (the checkpoint is resharded to TP=PP=1 on load); under torchrun,
``--tensor``/``--pipeline`` split the model across the launched processes instead.

Weight-space merges of Hugging Face folders are `launch/merge_checkpoints.py`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dnmopd.io import parse_byte_size


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", type=Path,
                        help="run checkpoint (iter_*, with model/) or student checkpoint folder (has student.json)")
    source.add_argument("--from-hf", type=Path, help="Hugging Face model folder to turn into a student checkpoint")
    parser.add_argument("--output", type=Path, required=True, help="folder to create (replaced if it exists)")
    parser.add_argument("--base-model", type=Path, help="HF folder of the base model (default: the one recorded)")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer folder with chat template (default: base model)")
    parser.add_argument("--base-model-id", help="Hub id of the base model for the model card (e.g. Qwen/Qwen3.5-4B)")
    parser.add_argument("--license", help="license id for the model card (default: the base model card's)")
    parser.add_argument("--name", help="model card title (default: the run name of the training config)")
    parser.add_argument("--training-config", type=Path, help="training config file quoted in the model card")
    parser.add_argument("--metrics", type=Path, help="JSON object of final metrics for the model card")
    parser.add_argument("--max-shard-size", type=parse_byte_size, default="5GB", help="largest safetensors shard")
    parser.add_argument("--tolerance", type=float, default=1e-2, help="max |logit difference| accepted (float32)")
    parser.add_argument("--probe-length", type=int, default=32, help="tokens per probe sequence for verification")
    parser.add_argument("--dtype", default="auto", help="--from-hf: parameter dtype (auto = the checkpoint's)")
    parser.add_argument("--tensor", type=int, default=1, help="tensor-parallel size (with torchrun)")
    parser.add_argument("--pipeline", type=int, default=1, help="pipeline-parallel size (with torchrun)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    card = card_options(args)
    import torch.distributed

    from dnmopd.student import BuildOptions, ParallelDims, Student, init_distributed
    from dnmopd.student.cpu_compat import cpu_compat

    init_distributed()
    with cpu_compat():
        dims = ParallelDims.Config(tensor=args.tensor, pipeline=args.pipeline).build()
        if args.from_hf:
            print(f"loading {args.from_hf}", flush=True)
            student = Student.from_hf(args.from_hf, dims, BuildOptions(dtype=args.dtype))
            student.save_checkpoint(args.output)
            print(f"saved student checkpoint {args.output}", flush=True)
        else:
            export(args, dims, card)
        dims.destroy()
    torch.distributed.destroy_process_group()
    return 0


def run_checkpoint(path: Path) -> tuple[Path, int | None, Path | None]:
    """(student checkpoint folder, update, run directory) of a ``--checkpoint`` argument: a run checkpoint
    ``<run>/checkpoints/iter_N`` (its ``model/`` folder) or a student checkpoint folder itself."""
    from dnmopd.trainer import checkpoint

    if (path / "model" / "student.json").is_file():
        state = path / "trainer_state.json"
        update = json.loads(state.read_text())["update"] if state.is_file() else None
        return path / "model", update, path.parent.parent
    match = checkpoint.PATTERN.match(path.parent.name)
    if path.name == "model" and match:
        return path, int(match.group(1)), path.parent.parent.parent
    return path, None, None


def final_metrics(run_dir: Path | None, update: int | None) -> dict | None:
    """The metrics record of the checkpoint's last update in ``<run>/metrics.jsonl``, when there is one."""
    log = run_dir / "metrics.jsonl" if run_dir else None
    if update is None or log is None or not log.is_file():
        return None
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    last = [r for r in records if r.get("step") == update - 1]
    return {k: v for k, v in last[-1].items() if k not in ("step", "time")} if last else None  # time: of logging


def card_options(args: argparse.Namespace):
    from dnmopd.hf.model_card import CardConfig

    try:
        return CardConfig(base_model=args.base_model_id, license=args.license)
    except ValueError as error:
        raise SystemExit(f"model card options (--base-model-id, --license): {error}") from None


def export(args: argparse.Namespace, dims, card) -> None:
    from dnmopd.hf.release import write_release
    from dnmopd.student import Student

    folder, update, run_dir = run_checkpoint(args.checkpoint)
    metrics = json.loads(args.metrics.read_text()) if args.metrics else final_metrics(run_dir, update)
    if metrics is not None and not isinstance(metrics, dict):
        raise SystemExit(f"{args.metrics}: expected a JSON object of metric name -> value")
    config_file = args.training_config or (run_dir / "config.yaml" if run_dir else None)
    training_config = config_file.read_text() if config_file and config_file.is_file() else None
    print(f"loading {folder}", flush=True)
    student = Student.from_checkpoint(folder, dims)
    where = f"checkpoint {args.checkpoint.name}" + (f" (update {update})" if update is not None else "")
    write_release(
        student,
        args.output,
        base_model=args.base_model,
        tokenizer=args.tokenizer,
        name=args.name,
        source=f"the training {where}",
        card=card,
        training_config=training_config,
        metrics=metrics,
        max_shard_bytes=args.max_shard_size,
        tolerance=args.tolerance,
        probe_length=args.probe_length,
    )
    print(f"wrote release {args.output}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
