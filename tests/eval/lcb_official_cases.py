"""Crafted LiveCodeBench programs, one or more per rule of the official runner, with its verdicts.

Each case is ``(name, program, tests, official verdict)``; ``tests`` is an ``input_output`` dict as the
catalog's test files hold it (``fn_name`` None for standard input). The verdicts are those of
``lcb_runner.evaluation.compute_code_generation_metrics.check_correctness(sample, program, timeout=6)`` (correct
iff every result is > 0) at LiveCodeBench/LiveCodeBench@28fef95e (``protocol.LCB_RUNNER``), run on Python 3.11
with numpy 2.4 and the grading process's standard input at end of file; the comment on each case names the
line of ``lcb_runner/evaluation/testing_util.py`` at that commit that decides it. The cases marked
``REVISION_15808C76`` get the other verdict from the runner one revision earlier (15808c76), whose stdin mock
has no ``buffer``.
"""

SUM = {"inputs": ["1 2\n", "40 2\n"], "outputs": ["3\n", "42\n"], "fn_name": None}
LINES = {"inputs": ["2\n3\n4\n"], "outputs": ["9\n"], "fn_name": None}
ADD = {"inputs": ["1\n2", "40\n2"], "outputs": ["3", "42"], "fn_name": "add"}
PAIR = {"inputs": ["[2, 7, 11, 15]\n9"], "outputs": ["[0, 1]"], "fn_name": "twoSum"}
KEYS = {"inputs": ['{"1": 5, "2": 7}'], "outputs": ["12"], "fn_name": "total"}
DEPTH = {"inputs": ["30000\n"], "outputs": ["30000\n"], "fn_name": None}
DEEPER = {"inputs": ["100000\n"], "outputs": ["100000\n"], "fn_name": None}
POSITIVE = {"inputs": ["5", "-1"], "outputs": ["true", "false"], "fn_name": "positive"}
BIG = {"inputs": ["5000\n"], "outputs": ["1" + "0" * 5000 + "\n"], "fn_name": None}

READ_TWO = "a, b = map(int, {}.split())\nprint(a + b)"
SOLUTION_ADD = "class Solution:\n    def add(self, a, b):\n        return {}"
RECURSE = ("def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"
           "n = int(input())\n{}print(depth(n))")

CASES = [
    # numpy: testing_util.py imports numpy (line 13), so the program's own import succeeds.
    ("numpy import, stdin", "import numpy as np\n" + READ_TWO.format("input()").replace("a + b", "np.int64(a) + b"),
     SUM, True),
    ("numpy array sum, stdin", "import numpy as np\nn = [int(input()) for _ in range(3)]\nprint(np.array(n).sum())",
     LINES, True),
    # grade_call_based, `tmp_result = prediction == gt_out`: a numpy scalar equals the int.
    ("numpy scalar return", "import numpy as np\n" + SOLUTION_ADD.format("np.int64(a) + b"), ADD, True),
    ("numpy bool return", "import numpy as np\nclass Solution:\n    def positive(self, x):\n"
                          "        return np.array([x]).sum() > 0", POSITIVE, True),
    # exit codes: call_method swallows SystemExit (`except SystemExit`), the captured output is compared.
    ("sys.exit(1) after the answer", "import sys\n" + READ_TWO.format("input()") + "\nsys.exit(1)", SUM, True),
    ("exit() after the answer", READ_TWO.format("input()") + "\nexit()", SUM, True),
    ("SystemExit raised", READ_TWO.format("input()") + "\nraise SystemExit(3)", SUM, True),
    # reliability_guard sets builtins.quit = None (exit stays): calling it is a TypeError, a runtime error.
    ("quit() after the answer", READ_TWO.format("input()") + "\nquit()", SUM, False),
    # os._exit ends the process before run_test returns: check_correctness fills -1 (global timeout branch).
    ("os._exit after the answer", "import os\n" + READ_TWO.format("input()") + "\nos._exit(0)", SUM, False),
    ("exception after the answer", READ_TWO.format("input()") + "\nraise ValueError('late')", SUM, False),
    # grade_call_based: SystemExit is not an Exception; it leaves run_test and the process: -1.
    ("sys.exit in a functional solution", "import sys\n" + SOLUTION_ADD.format("sys.exit(0)"), ADD, False),
    # dict arguments: grade_call_based json.loads every line and passes it as is (no int-key conversion).
    ("int keys on a JSON dict", "class Solution:\n    def total(self, d):\n        return d[1] + d[2]", KEYS, False),
    ("string keys on a JSON dict", "class Solution:\n    def total(self, d):\n        return d['1'] + d['2']",
     KEYS, True),
    # tuple to list at the top level only (`if isinstance(prediction, tuple)`).
    ("tuple return", "class Solution:\n    def twoSum(self, nums, target):\n        return (0, 1)", PAIR, True),
    ("nested tuple return", "class Solution:\n    def twoSum(self, nums, target):\n        return [(0, 1)][0:1]",
     {"inputs": ["[1]\n1"], "outputs": ["[[0, 1]]"], "fn_name": "twoSum"}, False),
    ("module function without Solution", "def add(a, b):\n    return a + b", ADD, True),
    # compile_code: `if "class Solution" in code` builds tmp_sol.Solution(), which is missing here.
    ("class Solution only in a comment", "# class Solution is not needed\ndef add(a, b):\n    return a + b",
     ADD, False),
    # recursion: import_string ends with sys.setrecursionlimit(50000).
    ("recursion 30000 deep", RECURSE.format(""), DEPTH, True),
    ("recursion 100000 deep", RECURSE.format(""), DEEPER, False),
    ("recursion 100000 deep, own limit", RECURSE.format("import sys\nsys.setrecursionlimit(300000)\n"),
     DEEPER, True),
    # compute_code_generation_metrics.py line 7: sys.set_int_max_str_digits(50000) in the grading process.
    ("5001-digit output", "print(10 ** int(input()))", BIG, True),
    # stdin forms (call_method): sys.stdin is MockStdinWithBuffer, open is patched but the import block's
    # `from builtins import *` bound the real open; `from sys import *` bound the real stdout.
    ("input()", READ_TWO.format("input()"), SUM, True),
    ("sys.stdin.readline()", "import sys\n" + READ_TWO.format("sys.stdin.readline()"), SUM, True),
    ("input = sys.stdin.readline", "import sys\ninput = sys.stdin.readline\n" + READ_TWO.format("input()"), SUM,
     True),
    ("sys.stdin.read()", "import sys\n" + READ_TWO.format("sys.stdin.read()"), SUM, True),
    ("sys.stdin.readlines()", "import sys\nprint(sum(int(x) for x in sys.stdin.readlines() if x))", LINES, True),
    ("for line in sys.stdin", "import sys\nprint(sum(int(line) for line in sys.stdin))", LINES, False),
    ("open(0).read()", READ_TWO.format("open(0).read()"), SUM, False),
    ("sys.stdin.buffer.read()", "import sys\n" + READ_TWO.format("sys.stdin.buffer.read()"), SUM, True),  # 15808c76
    ("sys.stdin.buffer.readline() twice", "import sys\nr = sys.stdin.buffer.readline\n"
                                          "print(int(r()) + int(r()) + int(r()))", LINES, False),
    ("from sys import stdin; stdin.readline()", "from sys import stdin\nprint(sum(int(stdin.readline()) "
                                                 "for _ in range(3)))", LINES, True),
    ("sys.stdout.write", "import sys\na, b = map(int, input().split())\nsys.stdout.write(str(a + b) + '\\n')",
     SUM, True),
    ("bare stdout.write", "a, b = map(int, input().split())\nstdout.write(str(a + b) + '\\n')", SUM, False),
    ("sys.stdout.buffer.write", "import sys\na, b = map(int, input().split())\n"
                                "sys.stdout.buffer.write(str(a + b).encode())", SUM, False),
    ("os.write to fd 1", "import os\na, b = map(int, input().split())\nos.write(1, str(a + b).encode())", SUM,
     False),
    ("answer plus stderr", "import sys\n" + READ_TWO.format("input()") + "\nprint('debug', file=sys.stderr)", SUM,
     True),
    # clean_if_name unwraps a final `if __name__ == '__main__':`.
    ("main guard", "def main():\n    " + READ_TWO.format("input()").replace("\n", "\n    ")
                   + "\nif __name__ == '__main__':\n    main()", SUM, True),
    # make_function moves top-level statements into wrapped_function: `global` then misses the variable.
    ("global at top level", "total = 0\ndef add(x):\n    global total\n    total += x\n"
                            "for v in input().split():\n    add(int(v))\nprint(total)", SUM, False),
    # reliability_guard: os.getcwd = None; sys.modules['resource'] = None.
    ("os.getcwd()", "import os\nos.getcwd()\n" + READ_TWO.format("input()"), SUM, False),
    ("import resource", "import resource\n" + READ_TWO.format("input()"), SUM, False),
    ("wrong answer", READ_TWO.format("input()").replace("a + b", "a - b"), SUM, False),
    ("decimal-equal output", "a, b = map(int, input().split())\nprint(f'{a + b}.000')", SUM, True),
]

REVISION_15808C76 = {"sys.stdin.buffer.read()", "for line in sys.stdin"}
"""At 15808c76, sys.stdin is a StringIO: it has no ``buffer`` (AttributeError, a runtime error) and it is iterable."""
