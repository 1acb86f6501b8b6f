"""The code verifier: program extraction, label validation, and verdicts for correct, wrong, crashing,
slow, memory-hungry and non-compiling programs on the sample code tasks, in the sandbox, under both rule sets.
(The comparison rules are in test_code_compare.py, hostile and wrong programs in test_code_hostile.py.)"""

from __future__ import annotations

import functools
import json
import random
import threading
import time
from pathlib import Path

import pytest

from dnmopd.verifiers.code import CodeJudge, extract_program, paper_program, parse_label

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


@pytest.fixture(scope="module")
def paper_judge():
    with CodeJudge(CodeJudge.Config(rules="paper", workers=2)) as j:
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


def test_the_paper_rules_extract_as_the_reference_judge():
    assert paper_program("a\n```python\nprint(1)\n```\nb\n```python\nprint(2)\n```\nc") == "\nprint(2)\n"
    assert paper_program("prose first\n```py\nprint(3)\n```") == "prose first\n"  # only ```python counts
    assert paper_program("print(4)") == "print(4)"
    assert paper_program("```python\nprint(5)") == "\nprint(5)"


@pytest.mark.parametrize(("label", "message"), [
    ("{inputs", "the label is not JSON"),
    ('{"inputs": ["1"], "inputs": ["2"], "outputs": ["1"]}', "duplicate key 'inputs'"),
    ('[1, 2]', "must be a JSON object"),
    ('{"outputs": ["1"]}', "missing field 'inputs'"),
    ('{"inputs": ["1"]}', "missing field 'outputs'"),
    ('{"inputs": "1", "outputs": ["1"]}', "'inputs' must be a list, got str"),
    ('{"inputs": ["1"], "outputs": {"0": "1"}}', "'outputs' must be a list, got dict"),
    ('{"inputs": ["1"], "outputs": []}', "as many outputs as inputs"),
    ('{"inputs": [], "outputs": []}', "at least one"),
    ('{"inputs": [[1]], "outputs": [1], "fn_name": "os.system"}', "'fn_name' must be a plain Python identifier"),
    ('{"inputs": [[1]], "outputs": [1], "fn_name": "class"}', "'fn_name' must be a plain Python identifier"),
    ('{"inputs": [[1]], "outputs": [1], "fn_name": 7}', "'fn_name' must be a plain Python identifier"),
    ('{"inputs": ["1", "not json"], "outputs": [1, 2], "fn_name": "f"}', r"inputs\[1\] line 1 is not JSON"),
    ('{"inputs": ["1\\n{"], "outputs": [1], "fn_name": "f"}', r"inputs\[0\] line 2 is not JSON"),
    ('{"inputs": [3], "outputs": [1], "fn_name": "f"}', r"inputs\[0\] must be a list of arguments"),
    ('{"inputs": [[1]], "outputs": ["[1,"], "fn_name": "f"}', r"outputs\[0\] is not JSON"),
    ('{"inputs": [5], "outputs": ["5"]}', r"inputs\[0\] must be a string or a list of strings, got int"),
    ('{"inputs": ["5"], "outputs": [["5", 6]]}', r"outputs\[0\] must be a string or a list of strings"),
])
def test_malformed_labels_raise_with_the_field_named(label, message):
    with pytest.raises(ValueError, match=message):
        parse_label(label)


def test_labels_are_normalized_as_the_judge_uses_them():
    stdin = parse_label('{"inputs": [["3", "1 2 3"], "5\\n"], "outputs": [["6"], "5\\n"]}')
    assert (stdin.inputs, stdin.outputs, stdin.fn_name) == (["3\n1 2 3", "5\n"], ["6", "5\n"], None)
    call = parse_label({"inputs": ["[1, 2]\n\"x\"", [{"1": 2}]], "outputs": ["[3]", [True]], "fn_name": "f"})
    assert (call.inputs, call.outputs, call.fn_name) == ([[[1, 2], "x"], [{"1": 2}]], [[3], [True]], "f")
    assert parse_label('{"inputs": ["1"], "outputs": ["1"], "fn_name": null}').fn_name is None


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="rules must be one of per_test, paper"):
        CodeJudge.Config(rules="strict")
    with pytest.raises(ValueError, match="python_packages"):
        CodeJudge.Config(python_packages=[""])
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


def test_reference_solutions_of_every_sample_task_pass_under_the_paper_rules(paper_judge):
    verdicts = paper_judge.judge_many((fenced(SOLUTIONS[key(r)]), r["label"]) for r in SAMPLE_TASKS)
    assert verdicts == [True] * len(SAMPLE_TASKS)


@pytest.mark.parametrize("rules", ["per_test", "paper"])
@pytest.mark.parametrize(("body", "returns", "reason"), [
    ("print('definitely not the answer')", "'definitely not the answer'", "wrong_answer"),
    ("raise RuntimeError('boom')", "None", "runtime_error"),
    ("def broken(:\n    pass", "None", "compile_error"),
])
def test_failing_programs_on_every_sample_task(code_judge, paper_judge, rules, body, returns, reason):
    judge_ = code_judge if rules == "per_test" else paper_judge
    futures = [judge_.submit_details(fenced(program_for(r, body, returns)), r["label"]) for r in SAMPLE_TASKS]
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


# Where the paper's judge fails a correct program of these tasks (docs/verifiers.md lists them).
PAPER_DIFFERS = {
    "lines_and_spacing": "wrong_answer",                    # padded lines against an expected empty line
    "call_returning_tuple_and_int_keys": "wrong_answer",    # Python ==: (1, 3) != [1, 3], 1 != "1"
    "call_with_integer_keyed_argument": "runtime_error",    # it passes an integer-keyed dict alone
    "list_valued_stdin": "wrong_answer",                    # it feeds and expects list fields as JSON text
}


@pytest.mark.parametrize("name", sorted(OWN_TASKS))
def test_label_formats_and_comparison_rules(code_judge, paper_judge, name):
    task = OWN_TASKS[name]
    label = json.dumps(task["label"])
    assert code_judge.judge_details(fenced(task["correct"]), label).reason == "passed"
    assert code_judge.judge_details(fenced(task["wrong"]), task["label"]).reason == "wrong_answer"
    assert paper_judge.judge_details(fenced(task["correct"]), label).reason == PAPER_DIFFERS.get(name, "passed")
    assert paper_judge.judge_details(fenced(task["wrong"]), label).verdict is False


def stdin_task(inputs, outputs) -> str:
    return json.dumps({"inputs": inputs, "outputs": outputs})


ECHO = stdin_task(["7\n"], ["7\n"])


@pytest.mark.parametrize(("program", "label", "paper", "per_test"), [
    # `1 2 3` is not `1\n2\n3` for the reference judge
    ("print(*input().split(), sep='\\n')", stdin_task(["1 2 3\n"], ["1 2 3\n"]), "wrong_answer", "passed"),
    ("print(input())\nexit()", ECHO, "runtime_error", "passed"),  # its guard sets exit to None
    ("import sys\nprint(sys.stdin.buffer.read().decode().strip())", ECHO, "runtime_error", "passed"),  # StringIO
    ("x = input()\ndef show():\n    global x\n    print(x)\nshow()", ECHO, "runtime_error", "passed"),  # code()
    # `stdin` of its import block is the patched object, whose readline drops the newline
    ("print(stdin.readline() + '|')", stdin_task(["7\n"], ["7|\n"]), "passed", "wrong_answer"),
    ("def main():\n    print(input())\nif __name__ == '__main__':\n    main()", ECHO, "passed", "passed"),
])
def test_the_paper_rules_run_programs_as_the_reference_judge(code_judge, paper_judge, program, label, paper,
                                                             per_test):
    assert paper_judge.judge_details(fenced(program), label).reason == paper
    assert code_judge.judge_details(fenced(program), label).reason == per_test


@pytest.mark.slow
def test_the_paper_time_limits():
    judge_ = CodeJudge(CodeJudge.Config(rules="paper", workers=1))
    three = stdin_task(["1\n", "2\n", "3\n"], ["1\n", "2\n", "3\n"])
    steady = fenced("import time\ntime.sleep(2.5)\nprint(input())")  # 7.5 s in all: over the global 6 s
    j = judge_.judge_details(steady, three)
    assert (j.verdict, j.reason, j.failed_test, j.detail) == (False, "time_limit", 2, "wall limit"), j
    stuck = fenced("import time\nn = int(input())\ntime.sleep(5.5 if n == 1 else 0)\nprint(n)")
    j = judge_.judge_details(stuck, three)
    assert (j.verdict, j.reason, j.failed_test) == (False, "time_limit", 0) and "alarm" in j.detail, j
    assert judge_.judge(fenced("import time\ntime.sleep(1)\nprint(input())"), three) is True


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



def _constant(value, _given):
    return value


def _paper_reference(label: dict, run) -> bool:
    """The paper's judge on a label (reference-behavior 5.5 and 6.3), for programs whose behaviour ``run``
    gives in this process: list-valued fields rewritten into JSON text, call arguments and expected values read
    back from it, return values compared by ``==`` and against the first element of a non-empty expected list,
    stdout compared stripped, whole or line by line."""
    for given, want in zip(label["inputs"], label["outputs"], strict=True):
        given = "\n".join(json.dumps(arg) for arg in given) if isinstance(given, list) else given
        want = json.dumps(want[0] if len(want) == 1 else want) if isinstance(want, list) else want
        if "fn_name" in label:
            got, want = run([json.loads(line) for line in given.split("\n")]), json.loads(want)
            ok = got == want or (isinstance(want, list) and len(want) > 0 and got == want[0])
        else:
            got = run(given)
            ok = got.strip() == want.strip() or [x.strip() for x in got.split("\n") if x.strip()] == \
                [x.strip() for x in want.split("\n") if x.strip()]
        if not ok:
            return False
    return True


def test_the_paper_rules_read_label_shapes_as_the_papers_judge(paper_judge):
    """Differential: generated labels with list-valued inputs, one-element and longer output lists, strings
    and JSON text, in stdin and call mode; every program's verdict equals the paper judge's."""
    rng = random.Random(25)
    stdin_inputs = ["a\nb", ["a", "b"], ["a"], ["x y"]]
    stdin_outputs = ["a", ["a"], ["a", "b"], ["a\nb"], [], '"a"']
    stdin_programs = {  # source -> what it prints for an input text
        "print(input())": lambda text: text.split("\n")[0] + "\n",
        "import sys\nprint(sys.stdin.read())": lambda text: text + "\n",
        **{f"print({text!r})": functools.partial(_constant, text + "\n")
           for text in ("a", '"a"', '["a", "b"]', "a\nb", "[]", '"a\\nb"')},
    }
    call_inputs = [[1], [[1, 2]], [1, "x"], "1\n2", "[1, 2]"]
    call_outputs = [[[1, 2]], [1], [], [1, 2], "[1, 2]", "1", [[1]], [None]]
    call_programs = {  # source -> what it returns for an argument list
        **{f"def f(*args):\n    return {value!r}": functools.partial(_constant, value)
           for value in (1, [1, 2], [[1, 2]], [], [1], None)},
        "def f(*args):\n    return args[0]": lambda args: args[0],
        "def f(*args):\n    return list(args)": lambda args: list(args),
    }
    cases = []
    for _ in range(14):
        n = rng.randint(1, 2)
        label = {"inputs": [rng.choice(stdin_inputs) for _ in range(n)],
                 "outputs": [rng.choice(stdin_outputs) for _ in range(n)]}
        source = rng.choice(list(stdin_programs))
        cases.append((source, label, _paper_reference(label, stdin_programs[source])))
        label = {"fn_name": "f", "inputs": [rng.choice(call_inputs) for _ in range(n)],
                 "outputs": [rng.choice(call_outputs) for _ in range(n)]}
        source = rng.choice(list(call_programs))
        cases.append((source, label, _paper_reference(label, call_programs[source])))
    for source, label, want in [  # the two shortest cases
            ("def f(a):\n    return 1", {"fn_name": "f", "inputs": [[1]], "outputs": [[[1, 2]]]}, True),
            ("print(input())", {"inputs": [["a"]], "outputs": ["a"]}, False)]:
        assert _paper_reference(label, call_programs["def f(*args):\n    return 1"] if "fn_name" in label
                                else stdin_programs["print(input())"]) is want
        cases.append((source, label, want))
    assert {want for *_, want in cases} == {True, False}
    got = paper_judge.judge_many((f"```python\n{source}\n```", json.dumps(label)) for source, label, _ in cases)
    assert [(source, label, verdict) for (source, label, _), verdict in zip(cases, got, strict=True)] == cases
