"""LiveCodeBench grading in the sandbox: extraction, the official runner's rules, hostile programs."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from lcb_official_cases import CASES, REVISION_15808C76

from dnmopd.eval.graders.code import LCBGrader, extract_code, stdout_matches

STDIN_SUM = {"inputs": ["1 2\n", "-5 5\n"], "outputs": ["3\n", "0\n"], "fn_name": None}
TWO_SUM = {"inputs": ["[2, 7, 11, 15]\n9", "[3, 2, 4]\n6"], "outputs": ["[0, 1]", "[1, 2]"], "fn_name": "twoSum"}


def fenced(program):
    return f"Here is my solution.\n```python\n{program}\n```\nDone."


@pytest.fixture(scope="module")
def grader(catalogs):
    return LCBGrader(catalogs["lcb_v5"], memory_bytes=2 << 30, workers=2)


def test_verdicts_equal_the_official_runner(grader):
    """Every crafted program gets the official runner's verdict at the pinned commit (lcb_official_cases)."""
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda case: grader.verdict(case[2], fenced(case[1])), CASES))
    wrong = [(name, v.correct, v.error) for (name, _, _, official), v in zip(CASES, got, strict=True)
             if v.correct != official]
    assert not wrong
    assert REVISION_15808C76 <= {name for name, *_ in CASES}


def test_numpy_is_importable_while_network_and_writes_stay_denied(grader):
    program = ("import numpy, os, socket\n"
               "try:\n    socket.create_connection(('127.0.0.1', 9), timeout=1)\n    print('network')\n"
               "except OSError:\n    pass\n"
               "try:\n    open(os.path.join(os.path.dirname(numpy.__file__), 'x'), 'w')\n    print('wrote')\n"
               "except OSError:\n    pass\n"
               "print(numpy.int64(input()) * 2)")
    assert grader.passes({"inputs": ["21\n"], "outputs": ["42\n"], "fn_name": None}, fenced(program))


def test_extraction_takes_the_last_fenced_block():
    text = "```python\nprint(1)\n```\nbetter:\n```python\nprint(2)\n```"
    assert extract_code(text) == "print(2)"
    assert extract_code("print(1)") is None
    assert extract_code("```python\nprint(1)") is None


def test_official_stdout_comparison():
    assert stdout_matches("3\n", "3")
    assert stdout_matches(" 1 2 \n3", "1 2\n3\n")
    assert stdout_matches("0.50", "0.5")  # equal Decimals
    assert not stdout_matches("0.5000001", "0.5")
    assert not stdout_matches("1 2 3", "1 2\n3")  # lines must match one to one
    assert not stdout_matches("abc", "abd")


def test_stdin_and_call_based_programs(grader):
    assert grader.passes(STDIN_SUM, fenced("a, b = map(int, input().split())\nprint(a + b)"))
    assert not grader.passes(STDIN_SUM, fenced("a, b = map(int, input().split())\nprint(a - b)"))
    solution = ("class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
                "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
                "                return (seen[target - x], i)\n            seen[x] = i")
    assert grader.passes(TWO_SUM, fenced(solution))  # a tuple counts as the expected list
    assert not grader.passes(TWO_SUM, fenced(solution.replace("(seen[target - x], i)", "[i, seen[target - x]]")))


def test_unfenced_answer_is_wrong(grader):
    assert not grader.passes(STDIN_SUM, "a, b = map(int, input().split())\nprint(a + b)")


def test_shipped_catalog_tests_are_all_run(grader, catalogs):
    catalog = catalogs["lcb_v5"]
    question = next(q for q in catalog.rows if q["id"] == "atcoder:sample_sum")
    tests = catalog.lcb_tests(question)
    assert tests["inputs"] == ["1 2\n", "-5 5\n", "100 23\n"]  # the public test, then the private ones
    right = fenced("a, b = map(int, input().split())\nprint(a + b)")
    wrong_on_a_private_test = fenced("a, b = map(int, input().split())\nprint(a + b if a < 50 else 0)")
    assert [v.correct for v in grader.grade(question, [right, wrong_on_a_private_test])] == [True, False]


def test_memory_bomb_fails_and_the_grader_goes_on(grader):
    bomb = fenced("x = []\nwhile True:\n    x.append(bytearray(1 << 24))")
    assert not grader.passes(STDIN_SUM, bomb)
    assert grader.passes(STDIN_SUM, fenced("a, b = map(int, input().split())\nprint(a + b)"))


def test_swallowed_timeout_is_stopped_by_the_limits(catalogs):
    grader = LCBGrader(catalogs["lcb_v5"], timeout_s=1, memory_bytes=512 << 20)
    program = fenced("import time\nwhile True:\n    try:\n        time.sleep(100)\n    except BaseException:\n"
                     "        pass")
    start = time.monotonic()
    assert not grader.passes({"inputs": ["1\n"], "outputs": ["1\n"], "fn_name": None}, program)
    assert time.monotonic() - start < 7 + 5  # the global deadline for one test at timeout 1 is 7 s (+ start-up)


def test_fork_bomb_fails_and_the_grader_goes_on(catalogs):
    grader = LCBGrader(catalogs["lcb_v5"], timeout_s=2, memory_bytes=512 << 20)
    bomb = fenced("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass")
    assert not grader.passes({"inputs": ["1 2\n"], "outputs": ["3\n"], "fn_name": None}, bomb)
    assert grader.passes(STDIN_SUM, fenced("a, b = map(int, input().split())\nprint(a + b)"))
