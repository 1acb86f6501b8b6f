"""Evaluate models under the paper's frozen protocol dn-mopd-eval-v1 (docs/evaluation.md).

    python launch/evaluate.py prepare                          # fetch the pinned sources, build the catalogs
    python launch/evaluate.py prepare --nltk                   # ... and the NLTK data the IF checkers read
    python launch/evaluate.py prepare --samples --data-dir eval_samples   # offline: the catalogs shipped with dnmopd
    python launch/evaluate.py run --model runs/demo-cpu/release --data-dir eval_samples \
        --suites ifbench,aime25,lcb_v5 --limit 2 --n 2 --max-tokens 64       # a CPU-sized run (about a minute)
    python launch/evaluate.py run --model /models/student --config my_vllm.yaml   # servers (docs/evaluation.md)
    python launch/evaluate.py compare runs/eval/dn_mopd runs/eval/label --cap 16384

`run` checks a server engine's health first, generates (resumably), grades (cached) and prints the table; results
go to <output_dir>/<name>/<suite>/cap<cap>/ (raw/, grades/, records.jsonl, summary.json) and
<output_dir>/<name>/summary_cap<cap>.json, the plot to <output_dir>/suites_cap<cap>.png.
`compare` prints the paired bootstrap of A - B per suite, per domain and for the Total.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

SERVER_BACKENDS = ("sglang", "vllm")
SERVER_RETRY = {"max_attempts": 5, "retry_timeout_s": 60}
"""The retry budget of a server engine's requests during `run`, unless a config or --set gives one (the pool's
own defaults, 100 attempts over 600 s, outlast a server restart during training)."""


def _suites(text: str) -> list[str]:
    return [s for s in text.split(",") if s]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    prep = commands.add_parser("prepare", help="build the question catalogs from the pinned sources")
    prep.add_argument("--suites", type=_suites, default=None, help="comma-separated (default: all seven)")
    prep.add_argument("--data-dir", type=Path, default=Path("eval_data"), help="default: %(default)s")
    prep.add_argument("--samples", action="store_true", help="use the small catalogs shipped with dnmopd")
    prep.add_argument("--nltk", action="store_true", help="also fetch the NLTK data of the IF checkers")
    prep.add_argument("--endpoint", help="Hub URL (default: $HF_ENDPOINT or https://huggingface.co)")

    run = commands.add_parser("run", help="generate, grade and score one model")
    run.add_argument("--model", required=True, help="Hugging Face folder of the model")
    run.add_argument("--config", type=Path, action="append", default=[], help="YAML config(s), merged in order")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    run.add_argument("--suites", type=_suites, help="comma-separated suites")
    for flag in ("name", "data-dir", "output-dir"):
        run.add_argument(f"--{flag}")
    for flag in ("max-tokens", "limit", "n"):
        run.add_argument(f"--{flag}", type=int)
    run.add_argument("--no-progress", action="store_true", help="no progress bars")

    cmp = commands.add_parser("compare", help="paired bootstrap of A - B")
    cmp.add_argument("a", type=Path, help="results folder of model A (<output_dir>/<name>)")
    cmp.add_argument("b", type=Path, help="results folder of model B")
    cmp.add_argument("--cap", type=int, default=16384, help="default: %(default)s")
    cmp.add_argument("--replicates", type=int, default=None, help="bootstrap replicates (protocol: 10000)")
    return parser.parse_args(argv)


def prepare(args) -> int:
    from dnmopd.eval.catalog import prepare as build
    from dnmopd.eval.protocol import SUITES

    build(args.suites or list(SUITES), args.data_dir, samples=args.samples, endpoint=args.endpoint)
    if args.nltk:
        import nltk

        from dnmopd.eval.graders.ifeval import NLTK_RESOURCES

        target = args.data_dir / "nltk_data"
        for resource in NLTK_RESOURCES:
            if not nltk.download(resource.split("/")[-1], download_dir=str(target), quiet=True, raise_on_error=True):
                raise RuntimeError(f"NLTK could not fetch {resource}")
        print(f"NLTK data: {', '.join(NLTK_RESOURCES)} in {target}")
    return 0


def run(args) -> int:
    from dnmopd.config import load_config
    from dnmopd.config.loader import load_yaml
    from dnmopd.eval.config import EvalConfig
    from dnmopd.eval.runner import evaluate
    from dnmopd.rollout.base import RolloutError
    from dnmopd.serving.errors import ServingError

    overrides = [f"model={args.model}"]
    configured = {}
    for path in args.config:
        configured.update(load_yaml(path).data)
    if "engine" not in configured and not any(s.startswith("engine") for s in args.set):
        overrides += ["engine.backend=inprocess", f"engine.model_path={args.model}"]
    engine = configured.get("engine") or {}
    backend = next((s.split("=", 1)[1] for s in args.set if s.startswith("engine.backend=")), engine.get("backend"))
    if backend in SERVER_BACKENDS:
        overrides += [f"engine.pool.{key}={value}" for key, value in SERVER_RETRY.items()
                      if key not in (engine.get("pool") or {}) and not any(
                          s.startswith(f"engine.pool.{key}=") for s in args.set)]
    flags = {"name": args.name, "data_dir": args.data_dir, "output_dir": args.output_dir,
             "max_tokens": args.max_tokens, "limit": args.limit, "n": args.n}
    overrides += [f"{key}={value}" for key, value in flags.items() if value is not None]
    if args.suites:
        overrides.append(f"suites=[{', '.join(args.suites)}]")
    if args.no_progress:
        overrides.append("progress=false")
    config = load_config(EvalConfig, args.config, overrides + args.set)
    try:
        evaluate(config)
    except (RolloutError, ServingError) as error:  # a server that fails its check or its retry budget: the
        raise SystemExit(f"evaluate.py run: {error}") from None  # message names its URL
    return 0


def compare(args) -> int:
    from dnmopd.eval.bootstrap import compare as contrasts
    from dnmopd.eval.protocol import BOOTSTRAP_B
    from dnmopd.eval.runner import suite_question_scores

    a, b = suite_question_scores(args.a, args.cap), suite_question_scores(args.b, args.cap)
    if not set(a) & set(b):
        raise SystemExit(f"{args.a} and {args.b} have no suite in common at cap {args.cap}")
    table = Table(title=f"{args.a.name} - {args.b.name}, cap {args.cap}: paired bootstrap "
                        f"(B = {args.replicates or BOOTSTRAP_B}, seed 20260923, 95% interval)")
    for column in ("contrast", "delta (points)", "2.5%", "97.5%"):
        table.add_column(column, justify="left" if column == "contrast" else "right")
    for c in contrasts(a, b, args.replicates or BOOTSTRAP_B):
        table.add_row(c.name, f"{c.delta:+.2f}", f"{c.low:+.2f}", f"{c.high:+.2f}")
    Console().print(table)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return {"prepare": prepare, "run": run, "compare": compare}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
