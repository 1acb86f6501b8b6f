"""Code-verifier throughput: judgments per second on the sample code tasks with N workers, per rule set.

    python launch/bench_code_verifier.py [--workers 1,2,4] [--rounds 3] [--rules per_test,paper]

Each round judges, for every task, its reference solution (correct: every test runs) and a wrong program
(stops at the first test), through one ``CodeJudge`` per rule set and worker count. Every verdict is checked
(the run fails if one is wrong). Prints one table row per rule set and worker count: judgments, tests
judged, sandboxed runs, seconds, judgments/s and tests/s (``per_test`` runs each test in its own sandboxed
process, ``paper`` all tests of a judgment in one). Run it from a checkout (it reads the sample tasks and
their solutions).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from dnmopd.sandbox import isolation_level
from dnmopd.verifiers.code import RULES, CodeJudge

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2,4", help="comma-separated worker counts (default 1,2,4)")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the tasks per worker count")
    parser.add_argument("--rules", default="per_test,paper", help="comma-separated rule sets (default both)")
    parser.add_argument("--tasks", type=Path, default=ROOT / "data" / "samples" / "teacher" / "code_train.jsonl",
                        help="code rows in the release schema (default: the sample teacher pool)")
    parser.add_argument("--no-prelude", action="store_true",
                        help="do not execute the reference judge's import block before each program")
    parser.add_argument("--solutions", type=Path, default=ROOT / "tests" / "fixtures" / "data" / "code_solutions.json",
                        help='reference programs by "<data_source>:<src_index>"')
    args = parser.parse_args(argv)
    try:
        args.workers = [int(n) for n in args.workers.split(",")]
    except ValueError:
        parser.error(f"--workers: expected comma-separated integers, got {args.workers!r}")
    if args.rounds < 1 or min(args.workers) < 1:
        parser.error("--rounds and --workers must be >= 1")
    args.rules = args.rules.split(",")
    unknown = sorted(set(args.rules) - set(RULES))
    if unknown:
        parser.error(f"--rules: unknown {', '.join(unknown)} (known: {', '.join(RULES)})")
    return args


def workload(tasks: Path, solutions: Path) -> list[tuple[str, str, bool, int]]:
    """(response, label, expected verdict, number of tests) for every task, correct and wrong."""
    programs = json.loads(solutions.read_text())
    items = []
    for line_number, line in enumerate(tasks.read_text().splitlines(), 1):
        row = json.loads(line)
        key = f"{row['metadata']['data_source']}:{row['metadata']['src_index']}"
        if key not in programs:
            raise SystemExit(f"{solutions}: no reference program for {key} ({tasks}:{line_number})")
        label = json.loads(row["label"])
        wrong = "print('wrong')\n"
        if label.get("fn_name"):
            wrong = f"def {label['fn_name']}(*args):\n    return 'wrong'\n"
        items.append((f"```python\n{programs[key]}```", row["label"], True, len(label["inputs"])))
        items.append((f"```python\n{wrong}```", row["label"], False, len(label["inputs"])))
    return items


def measure(rules: str, workers: int, items: list, rounds: int, prelude: bool) -> tuple[int, int, int, float, int]:
    """(judgments, tests judged, sandboxed runs, seconds, wrong verdicts)."""
    with CodeJudge(CodeJudge.Config(rules=rules, workers=workers, prelude=prelude)) as judge:
        judge.judge(*items[0][:2])  # warm-up: the interpreter's view, page cache
        start = time.perf_counter()
        futures = [(judge.submit_details(response, label), expected, tests)
                   for _ in range(rounds) for response, label, expected, tests in items]
        judged = runs = mistakes = 0
        for future, expected, tests in futures:
            judgment = future.result()
            mistakes += judgment.verdict is not expected
            judged += tests if judgment.verdict else (judgment.failed_test or 0) + 1
            runs += 1 if rules == "paper" else tests if judgment.verdict else (judgment.failed_test or 0) + 1
        return len(futures), judged, runs, time.perf_counter() - start, mistakes


def main(argv=None) -> int:
    args = parse_args(argv)
    items = workload(args.tasks, args.solutions)
    print(f"code verifier on {len(items) // 2} tasks x (correct, wrong) x {args.rounds} rounds; "
          f"isolation {isolation_level()}; prelude {'off' if args.no_prelude else 'on'}; {os.cpu_count()} CPUs",
          flush=True)
    print(f"{'rules':>8} {'workers':>7} {'judgments':>9} {'tests':>6} {'runs':>5} {'seconds':>8} {'judg/s':>7} "
          f"{'tests/s':>7}")
    failed = False
    for rules in args.rules:
        for workers in args.workers:
            judgments, judged, runs, seconds, mistakes = measure(rules, workers, items, args.rounds,
                                                                 not args.no_prelude)
            print(f"{rules:>8} {workers:>7} {judgments:>9} {judged:>6} {runs:>5} {seconds:>8.2f} "
                  f"{judgments / seconds:>7.1f} {judged / seconds:>7.1f}"
                  + (f"  {mistakes} WRONG VERDICTS" if mistakes else ""), flush=True)
            failed |= mistakes > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
