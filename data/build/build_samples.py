"""Build the sample data in the release schema (data/samples/) and the code reference solutions.

    .venv/bin/python data/build/build_samples.py            # rewrite the files
    .venv/bin/python data/build/build_samples.py --check    # exit 1 if a rebuild would change any file

The layout mirrors the release (reference-behavior 5.3), scaled down: a math pool of 48 synthetic problems
and a pool of 24 code tasks; the student set takes 16 of each (a seeded draw, ids ascending) and 16 of the
40 IF rows (``random.Random(42)`` shuffle, first 16, wrapped as one user message), then shuffles
``math + code + IF`` with the same generator instance. Teacher pools start with the student's rows of their
domain, then the rest of the pool in order.

The 40 IF rows are released rows, unchanged (the release's own lines, in release order), read from the copy of
the released IF pool in ``tests/fixtures/data/release``: the fewest rows that, taken greedily, cover every
constraint type, parameter value, list length and constraint count of the release, then the first rows not yet
taken. Everything is deterministic: running this twice gives identical bytes.
"""

from __future__ import annotations

import argparse
import json
import lzma
import random
import sys
import tempfile
from pathlib import Path

from code_tasks import ALL_TASKS, CodeTask
from math_tasks import math_problems

from dnmopd.io import atomic_write, write_jsonl
from dnmopd.data.manifest import build_manifest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"
SOLUTIONS = ROOT / "tests" / "fixtures" / "data" / "code_solutions.json"
RELEASE_IF_POOL = ROOT / "tests" / "fixtures" / "data" / "release" / "teacher" / "if_train.jsonl.xz"

MATH_SOURCE, CODE_SOURCE = "synthetic-math-v1", "synthetic-code-v1"
CODE_SUFFIX = "\nYou need to think first then write the Python code."
NUM_MATH_POOL, NUM_IF, NUM_STUDENT_PER_DOMAIN = 48, 40, 16
NUM_MATH_TEACHER = 32


def row(prompt, label: str, domain: str, source: str, index: int) -> dict:
    return {"prompt": prompt, "label": label, "domain": domain, "teacher": domain,
            "metadata": {"domain": domain, "data_source": source, "src_index": index}}


def user(content: str) -> list[dict]:
    return [{"content": content, "role": "user"}]


def code_prompt(task: CodeTask) -> str:
    if task.fn_name:
        body = task.statement
    else:
        sample_in = task.inputs[0]
        body = (f"{task.statement}\n\nThe input is read from standard input and the answer is printed to "
                f"standard output.\n\nExample input:\n{sample_in}\nExample output:\n{task.expected(sample_in)}")
    return body + CODE_SUFFIX


def code_label(task: CodeTask) -> str:
    if task.fn_name:
        outputs = [[task.expected(*args)] for args in task.inputs]
        return json.dumps({"fn_name": task.fn_name, "inputs": task.inputs, "outputs": outputs})
    return json.dumps({"inputs": task.inputs, "outputs": [task.expected(x) for x in task.inputs]})


def if_features(label: str) -> set[tuple]:
    """What an IF label exercises: its types, each parameter value (repeat_first: only that it has one), list
    lengths, and its number of constraints."""
    constraints = json.loads(label)
    features: set[tuple] = {("constraints", len(constraints))}
    for spec in constraints:
        kind = spec["type"]
        features.add((kind,))
        for name, value in spec.items():
            if name == "type" or kind == "repeat_first":
                continue
            values = value if isinstance(value, list) else [value]
            features.update({(kind, name, v) for v in values} | {(kind, name, "length", len(values))})
    return features


def released_if_rows(count: int) -> list[dict]:
    """``count`` released IF rows covering every feature of the release (see the module docstring)."""
    released = [json.loads(line) for line in lzma.decompress(RELEASE_IF_POOL.read_bytes()).decode().splitlines()]
    features = [if_features(r["label"]) for r in released]
    missing, chosen = set().union(*features), []
    while missing:
        best = max(range(len(released)), key=lambda i: (len(features[i] & missing), -i))
        chosen.append(best)
        missing -= features[best]
    if len(chosen) > count:
        raise SystemExit(f"covering the released IF pool takes {len(chosen)} rows, more than {count}")
    chosen += [i for i in range(len(released)) if i not in chosen][: count - len(chosen)]
    return [released[i] for i in sorted(chosen)]


def pools() -> tuple[list[dict], list[dict], list[dict]]:
    math_pool = [row(user(q), a, "math", MATH_SOURCE, i)
                 for i, (q, a) in enumerate(math_problems(NUM_MATH_POOL, seed=7))]
    code_pool = [row(user(code_prompt(t)), code_label(t), "code", CODE_SOURCE, i) for i, t in enumerate(ALL_TASKS)]
    return math_pool, code_pool, released_if_rows(NUM_IF)


def teacher_pool(pool: list[dict], student_ids: list[int], size: int) -> list[dict]:
    chosen = set(student_ids)
    return [pool[i] for i in student_ids] + [r for i, r in enumerate(pool) if i not in chosen][: size - len(chosen)]


def build_rows() -> dict[str, list[dict]]:
    math_pool, code_pool, if_rows = pools()
    draw = random.Random(0)
    math_ids = sorted(draw.sample(range(len(math_pool)), NUM_STUDENT_PER_DOMAIN))
    code_ids = sorted(draw.sample(range(len(code_pool)), NUM_STUDENT_PER_DOMAIN))
    rng = random.Random(42)
    shuffled_if = list(if_rows)
    rng.shuffle(shuffled_if)
    student_if = [{**r, "prompt": user(r["prompt"])} for r in shuffled_if[:NUM_STUDENT_PER_DOMAIN]]
    student = [math_pool[i] for i in math_ids] + [code_pool[i] for i in code_ids] + student_if
    rng.shuffle(student)
    return {
        "student/train_3domain.jsonl": student,
        "teacher/math_train.jsonl": teacher_pool(math_pool, math_ids, NUM_MATH_TEACHER),
        "teacher/code_train.jsonl": teacher_pool(code_pool, code_ids, len(code_pool)),
        "teacher/if_train.jsonl": if_rows,
    }


def solutions() -> dict[str, str]:
    return {f"{CODE_SOURCE}:{i}": task.solution for i, task in enumerate(ALL_TASKS)}


def write_all(samples: Path, solutions_path: Path) -> None:
    for rel, rows in build_rows().items():
        write_jsonl(samples / rel, rows)
    manifest = build_manifest(samples, repo_id="local/dnmopd-samples", revision="samples-v1")
    with atomic_write(samples / "MANIFEST.json") as handle:
        handle.write(json.dumps(manifest, indent=2) + "\n")
    with atomic_write(solutions_path) as handle:
        handle.write(json.dumps(solutions(), indent=1, sort_keys=True) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="rebuild into a temporary folder and compare")
    args = parser.parse_args()
    if not args.check:
        write_all(SAMPLES, SOLUTIONS)
        print(f"wrote {SAMPLES} and {SOLUTIONS}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        write_all(Path(tmp) / "samples", Path(tmp) / "code_solutions.json")
        pairs = [(Path(tmp) / "code_solutions.json", SOLUTIONS)] + [
            (p, SAMPLES / p.relative_to(Path(tmp) / "samples")) for p in (Path(tmp) / "samples").rglob("*.json*")]
        stale = [str(dst) for src, dst in pairs if not dst.exists() or src.read_bytes() != dst.read_bytes()]
    print("\n".join(f"out of date: {p}" for p in stale) or "sample data is up to date")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
