"""The code verifier: program extraction, tolerant comparison, label formats, and verdicts for correct,
wrong, crashing, slow, memory-hungry and non-compiling programs on the sample code tasks, in the sandbox."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from dnmopd.verifiers.code import (
    CodeJudge,
    extract_program,
    judge,
    outputs_match,
    parse_label,
    returns_match,
)

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_TASKS = [json.loads(line) for line in
                (ROOT / "data" / "samples" / "teacher" / "code_train.jsonl").read_text().splitlines()]
SOLUTIONS = json.loads((ROOT / "tests" / "fixtures" / "data" / "code_solutions.json").read_text())
OWN_TASKS = {name: task for name, task in
             json.loads((ROOT / "tests" / "fixtures" / "sandbox" / "code_tasks.json").read_text()).items()
             if not name.startswith("_")}
POOLED = CodeJudge.Config(workers=2)  # default limits: a busy machine must not fail correct programs
# A CPU-bound program meets the CPU limit first even on a machine busy enough to slow it down 10x.
CPU_LIMITED = CodeJudge.Config(test_timeout_s=1.0, test_wall_timeout_s=15.0)
WALL_LIMITED = CodeJudge.Config(test_timeout_s=1.0, test_wall_timeout_s=1.0)


def key(row: dict) -> str:
    return f"{row['metadata']['data_source']}:{row['metadata']['src_index']}"


def fenced(program: str) -> str:
    return f"Let me think.\n\n```python\n{program.rstrip()}\n```\n\nThis reads the input and prints the answer."


def program_for(row: dict, body: str, returns: str = "None") -> str:
    """``body`` as a stdin program, or, for a call-based task, inside the function the label names."""
    fn_name = json.loads(row["label"]).get("fn_name")
    if fn_name is None:
        return body
    indented = "".join(f"    {line}\n" for line in body.splitlines())
    return f"def {fn_name}(*args):\n{indented}    return {returns}\n"


@pytest.fixture(scope="module")
def code_judge():
    with CodeJudge(POOLED) as j:
        yield j


def test_extraction_takes_the_last_python_block_and_documents_the_fallbacks():
    assert extract_program("a\n```python\nprint(1)\n```\nb\n```python\nprint(2)\n```\nc") == "print(2)\n"
    assert extract_program("```Py\nprint(3)\n```") == "print(3)\n"
    assert extract_program("text\n```python\nprint(4)\n") == "print(4)\n"  # unclosed last fence
    assert extract_program("```\nprint(5)\n```\n```text\n1 2\n```") == "print(5)\n"  # untagged fallback
    assert extract_program("```python\nprint(6)\n```\n```\nprint(7)\n```") == "print(6)\n"
    assert extract_program("print(8)\n") == "print(8)\n"  # no fence: the response is the program
    assert extract_program("```bash\necho hi\n```") is None
    assert extract_program("```python\nprint(9)```") == "print(9)"  # a fence ends wherever it stands


@pytest.mark.parametrize(("got", "want", "match"), [
    ("3\n", "3", True),
    ("  1 2 \n\n 3\n\n", "1 2\n3\n", True),        # stripped lines, empty lines dropped
    ("1\n2 3\n", "1 2\n3\n", True),                # token by token
    ("0.333333\n", "0.3333333333\n", True),        # close floats
    ("YES 0.5000001", "YES 0.5", True),            # mixed tokens
    ("0.34\n", "0.3333333333\n", False),
    ("1000001\n", "1000000\n", False),             # integers must be exact, even where floats would be close
    ("3 2 1", "1 2 3", False),                     # order matters (no set comparison)
    ("1 1 2", "1 2", False),
    ("nan", "nan", True), ("nan", "0.0", False), ("inf", "1e308", False),
    ("", "0", False),
])
def test_tolerant_stdout_comparison(got, want, match):
    assert outputs_match(got, want) is match


def test_call_based_comparison():
    assert returns_match(7, "[7]") and returns_match(7, [7]) and returns_match([1, 2], [[1, 2]])
    assert returns_match({"1": 2}, {1: 2}) and returns_match([1, 2], "[1, 2]")
    assert returns_match([], "[]") and returns_match(None, "null")
    assert not returns_match(7, "[8]") and not returns_match(None, "[0]") and not returns_match([1, 2], [[2, 1]])


def test_malformed_labels_raise_with_the_problem_named():
    with pytest.raises(ValueError, match="not JSON"):
        parse_label("{inputs")
    with pytest.raises(ValueError, match="as many outputs as inputs"):
        parse_label('{"inputs": ["1"], "outputs": []}')
    with pytest.raises(ValueError, match="lists 'inputs' and 'outputs'"):
        parse_label('{"inputs": "1", "outputs": ["1"]}')
    with pytest.raises(ValueError, match="fn_name"):
        parse_label('{"inputs": [[1]], "outputs": [1], "fn_name": "os.system"}')
    with pytest.raises(ValueError, match="call-based output"):
        returns_match(1, "[1,")


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="workers"):
        CodeJudge.Config(workers=0)
    with pytest.raises(ValueError, match="test_timeout_s <= test_wall_timeout_s <= total_timeout_s"):
        CodeJudge.Config(test_timeout_s=10, total_timeout_s=5)
    with pytest.raises(ValueError, match="test_timeout_s <= test_wall_timeout_s"):
        CodeJudge.Config(test_timeout_s=3, test_wall_timeout_s=2)
    with pytest.raises(ValueError, match="unknown isolation level"):
        CodeJudge.Config(min_isolation="none")


def test_reference_solutions_of_every_sample_task_pass(code_judge):
    assert sum("fn_name" in json.loads(r["label"]) for r in SAMPLE_TASKS) >= 1
    verdicts = code_judge.judge_many((fenced(SOLUTIONS[key(r)]), r["label"]) for r in SAMPLE_TASKS)
    assert verdicts == [True] * len(SAMPLE_TASKS)


@pytest.mark.parametrize(("body", "returns", "reason"), [
    ("print('definitely not the answer')", "'definitely not the answer'", "wrong_answer"),
    ("raise RuntimeError('boom')", "None", "runtime_error"),
    ("def broken(:\n    pass", "None", "compile_error"),
])
def test_failing_programs_on_every_sample_task(code_judge, body, returns, reason):
    futures = [code_judge.submit_details(fenced(program_for(r, body, returns)), r["label"]) for r in SAMPLE_TASKS]
    judgments = [f.result() for f in futures]
    assert all(j.verdict is False and j.reason == reason and j.failed_test == 0 for j in judgments), judgments


def test_memory_hungry_programs_fail_with_memory_error():
    small = CodeJudge(CodeJudge.Config(memory_bytes=256 << 20))
    for row in (SAMPLE_TASKS[0], next(r for r in SAMPLE_TASKS if "fn_name" in json.loads(r["label"]))):
        hog = program_for(row, "chunks = []\nwhile True:\n    chunks.append(bytearray(32 << 20))")
        j = small.judge_details(fenced(hog), row["label"])
        assert (j.verdict, j.reason) == (False, "runtime_error") and "MemoryError" in j.detail, j
    row = SAMPLE_TASKS[0]
    spread = "import os, time\nfor _ in range(3):\n    if os.fork() == 0:\n        break\n" \
             "hoard = [bytearray(32 << 20) for _ in range(4)]\ntime.sleep(20)\n"
    j = small.judge_details(fenced(spread), row["label"])
    assert (j.verdict, j.reason) == (False, "memory_limit"), j


def test_slow_programs_fail_on_the_per_test_and_on_the_global_limit(code_judge):
    stdin_task = next(r for r in SAMPLE_TASKS if len(json.loads(r["label"])["inputs"]) == 4)
    call_task = next(r for r in SAMPLE_TASKS if "fn_name" in json.loads(r["label"]))
    for row in (stdin_task, call_task):
        j = CodeJudge(CPU_LIMITED).judge_details(fenced(program_for(row, "while True:\n    pass")), row["label"])
        assert (j.verdict, j.reason, j.failed_test, j.detail) == (False, "time_limit", 0, "cpu limit"), j
    sleeper = fenced(program_for(stdin_task, "import time\ntime.sleep(30)"))
    j = CodeJudge(WALL_LIMITED).judge_details(sleeper, stdin_task["label"])
    assert (j.verdict, j.reason, j.detail) == (False, "time_limit", "wall limit"), j
    # 4 tests of 1 s each within 3.5 s: each test is far within its own limit, all together are not.
    slow_but_right = "import time\ntime.sleep(1)\n" + SOLUTIONS[key(stdin_task)]
    tight = CodeJudge(CodeJudge.Config(test_timeout_s=2, test_wall_timeout_s=3.5, total_timeout_s=3.5))
    j = tight.judge_details(fenced(slow_but_right), stdin_task["label"])
    assert (j.verdict, j.reason) == (False, "time_limit") and j.failed_test >= 1, j  # earlier tests passed
    assert code_judge.judge(fenced(slow_but_right), stdin_task["label"]) is True


@pytest.mark.parametrize("name", sorted(OWN_TASKS))
def test_label_formats_and_comparison_rules(code_judge, name):
    task = OWN_TASKS[name]
    label = json.dumps(task["label"])
    assert code_judge.judge_details(fenced(task["correct"]), label).reason == "passed"
    assert code_judge.judge_details(fenced(task["wrong"]), task["label"]).reason == "wrong_answer"


def test_responses_as_a_chat_model_writes_them(code_judge):
    row = next(r for r in SAMPLE_TASKS if "fn_name" not in json.loads(r["label"]))
    right, wrong = SOLUTIONS[key(row)], "print('nope')\n"
    assert code_judge.judge(f"```python\n{wrong}```\nBetter:\n```python\n{right}```", row["label"]) is True
    assert code_judge.judge(f"```python\n{right}```\nOr:\n```python\n{wrong}```", row["label"]) is False
    assert code_judge.judge("I cannot solve this.\n```text\n42\n```", row["label"]) is False
    assert code_judge.judge(right, row["label"]) is True  # bare code


def test_a_call_based_program_cannot_print_its_own_result(code_judge):
    row = next(r for r in SAMPLE_TASKS if "fn_name" in json.loads(r["label"]))
    fn_name = json.loads(row["label"])["fn_name"]
    expected = json.dumps(json.loads(row["label"])["outputs"][0])
    forger = f"import sys\ndef {fn_name}(*args):\n    print({expected!r})\n    sys.stdout.flush()\n    return None\n"
    assert code_judge.judge_details(fenced(forger), row["label"]).reason == "wrong_answer"
    scribbler = f"import os\ndef {fn_name}(*args):\n    for fd in range(3, 10):\n        try:\n" \
                f"            os.write(fd, b'garbage')\n        except OSError:\n            pass\n    return 0\n"
    judgment = code_judge.judge_details(fenced(scribbler), row["label"])
    assert (judgment.verdict, judgment.reason) == (False, "wrong_answer"), judgment


def test_sandbox_failure_is_no_verdict_not_false(monkeypatch, tmp_path):
    row = SAMPLE_TASKS[0]
    with CodeJudge(POOLED) as j:
        monkeypatch.setenv("DNMOPD_SANDBOX", str(tmp_path / "missing"))
        judgment = j.judge_details(fenced(SOLUTIONS[key(row)]), row["label"])
    assert (judgment.verdict, judgment.reason) == (None, "infrastructure")
    assert "missing or not executable" in judgment.detail


def test_the_queue_is_bounded():
    row = next(r for r in SAMPLE_TASKS if "fn_name" not in json.loads(r["label"]))
    sleeper = fenced("import time\ntime.sleep(1.5)\nprint('late and wrong')")  # fails on the first test
    with CodeJudge(CodeJudge.Config(workers=1, queue_size=1)) as j:
        first, second = j.submit(sleeper, row["label"]), j.submit(sleeper, row["label"])
        third_submitted = threading.Event()
        threading.Thread(target=lambda: (j.submit(sleeper, row["label"]), third_submitted.set())).start()
        time.sleep(0.5)
        assert not third_submitted.is_set()  # one running, one waiting: the third submit blocks
        assert first.result() is False
        assert third_submitted.wait(timeout=30) and second.result() is False


def test_module_level_judge_uses_the_default_pool():
    row = SAMPLE_TASKS[-1]
    assert judge(fenced(SOLUTIONS[key(row)]), row["label"]) is True
