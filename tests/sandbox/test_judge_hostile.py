"""Hostile and wrong programs through the code judge, at every isolation level this machine offers: no
wrong program is judged correct, no program makes the judge raise, and the host is unchanged after each
run (no file in the shared temporary directories, no SysV IPC object, no process left)."""

from __future__ import annotations

import json
import os
import random
import socket
import textwrap
from pathlib import Path

import pytest
from sandbox_helpers import host_traces, levels_here, remove_traces, runtime_for, sysv_key, token

from dnmopd.verifiers.code import CodeJudge

SAMPLE_CODE = Path(__file__).resolve().parents[2] / "data" / "samples" / "teacher" / "code_train.jsonl"
CALL = json.dumps({"fn_name": "f", "inputs": [[3], [4]], "outputs": [[42], [43]]})
ECHO = json.dumps({"inputs": ["hello\n", "abc\n"], "outputs": ["hello\n", "abc\n"]})
RIGHT_CALL = "def f(x):\n    return x + 39\n"
RIGHT_ECHO = "print(input())\n"

# Programs that must be judged wrong on CALL; MARKER and KEY are replaced per run.
FORGERS = {
    "writes a result into every descriptor, then exits 0": """
        import os
        for fd in range(64):
            for text in (b"0 value 42\\n1 value 43\\n", b"[42]", b"42"):
                try:
                    os.write(fd, text)
                except OSError:
                    pass
        os._exit(0)
        """,
    "does so from inside the function": """
        import os
        def f(x):
            for fd in range(64):
                try:
                    os.write(fd, b"0 value 42\\n1 value 43\\n")
                except OSError:
                    pass
            os._exit(0)
        """,
    "replaces json.dumps": """
        import json
        json.dumps = lambda *args, **kwargs: "42"
        json.encoder.JSONEncoder.encode = lambda self, value: "42"
        def f(x):
            return None
        """,
    "writes a frame of the harness's format for its test, then returns": """
        import os, struct
        def f(x):
            for fd in range(3, 64):
                try:
                    os.write(fd, struct.pack("<BIQ", 1, 0, 2) + b"42")
                except OSError:
                    pass
            return None
        """,
    "reopens the harness's stdout through /proc": """
        import os
        def f(x):
            for pid in (os.getppid(), 1):
                try:
                    fd = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY)
                    os.write(fd, b"0 value 42\\n1 value 43\\n")
                except OSError:
                    pass
            os._exit(0)
        """,
    "kills the harness before it reports": "import os\ndef f(x):\n    os.kill(os.getppid(), 9)\n    return x + 39\n",
    "prints the result instead of returning it": "import sys\ndef f(x):\n    print(x + 39)\n    "
                                                 "sys.__stdout__.write(str(x + 39))\n    return None\n",
}

HOSTILE_CALLS = {
    "an object equal to everything": "class A:\n    __eq__ = lambda self, other: True\n    __hash__ = None\n"
                                     "def f(x):\n    return A()\n",
    "an int subclass equal to everything": "class I(int):\n    __eq__ = lambda self, other: True\n"
                                           "def f(x):\n    return I(0)\n",
    "an integer of 10,000 digits": "def f(x):\n    return 10 ** 10000\n",
    "a list nested 100,000 deep": "def f(x):\n    v = 42\n    for _ in range(100000):\n        v = [v]\n    return v\n",
    "a list that contains itself": "def f(x):\n    v = [42]\n    v.append(v)\n    return v\n",
    "a 64 MiB string": "def f(x):\n    return 'x' * (64 << 20)\n",
    "a set": "def f(x):\n    return {x + 39}\n",
    "a generator": "def f(x):\n    return (x + 39 for _ in range(1))\n",
    "an exception with a 10 MB message": "def f(x):\n    raise ValueError('x' * 10 ** 7)\n",
    "a C stack overflow": "import sys\nsys.setrecursionlimit(10 ** 7)\ndef g(n):\n    return g(n + 1) + 1\n"
                          "def f(x):\n    return g(0)\n",
    "SysV shared memory, memfd, a unix socket, files outside": """
        import ctypes, os, socket
        def f(x):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.shmget(KEY, 1 << 20, 0o1666), libc.semget(KEY, 1, 0o1666), libc.msgget(KEY, 0o1666)
            host = "/tmp/MARKER.sock"
            for attempt in (lambda: os.memfd_create("hoard"), lambda: socket.socket(socket.AF_UNIX).connect(host)):
                try:
                    attempt()
                except OSError:
                    pass
            for path in ("/tmp/MARKER-file", "/dev/shm/MARKER-shm", "/var/tmp/MARKER-file"):
                try:
                    open(path, "w").write("left behind")
                except OSError:
                    pass
            return None
        """,
    "a daemon that outlives the call": """
        import os, sys
        def f(x):
            if os.fork() == 0:
                os.setsid()
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", "MARKER"])
            return None
        """,
    "a fork bomb": """
        import os, time
        def f(x):
            for _ in range(200):
                try:
                    if os.fork() == 0:
                        time.sleep(60)
                except OSError:
                    break
            return None
        """,
    "kill -9 -1": "import os\ndef f(x):\n    try:\n        os.kill(-1, 9)\n    except OSError:\n        pass\n",
    "memory spread over processes": """
        import os, time
        def f(x):
            for _ in range(4):
                if os.fork() == 0:
                    break
            hoard = [bytearray(32 << 20) for _ in range(6)]
            time.sleep(60)
        """,
    "an endless loop": "def f(x):\n    while True:\n        pass\n",
}

HOSTILE_OUTPUTS = {
    "bytes 0xF5-0xFF": "import random, sys\nsys.stdout.buffer.write(bytes(random.randrange(0xF5, 0x100) "
                       "for _ in range(2048)))\n",
    "64 KiB of random bytes": "import os, sys\nsys.stdout.buffer.write(os.urandom(65536))\n",
    "an encoded lone surrogate": "import sys\nsys.stdout.buffer.write(b'hello\\xed\\xb2\\x80\\n')\n",
    "a lone surrogate": "print(input() + '\\udc80')\n",
    "the answer and a NUL": "print(input() + '\\0')\n",
    "an output flood": "while True:\n    print('x' * 4096)\n",
    "ten million digits on one line": "import sys\nsys.stdout.write('1' * 10 ** 7)\n",
    "sleeping past the limit": "import time\ntime.sleep(60)\n",
}


def hostile_judge(level: str, rules: str) -> CodeJudge:
    """A judge at ``level`` (``auto``: the strongest here) with small limits."""
    forced = {} if level == "auto" else {"isolation": level, "min_isolation": level}
    python = runtime_for("namespaces" if level == "auto" else level).executable
    return CodeJudge(CodeJudge.Config(rules=rules, python=python, workers=1, test_timeout_s=2, test_wall_timeout_s=3,
                                      total_timeout_s=10, memory_bytes=256 << 20, **forced))


def judged_wrong(judge: CodeJudge, program: str, label: str, level: str):
    """The judgment of one hostile program: False, and nothing of the run left on the host."""
    marker = token()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(f"/tmp/{marker}.sock")
    listener.listen(1)
    listener.setblocking(False)
    os.chmod(f"/tmp/{marker}.sock", 0o777)
    source = textwrap.dedent(program).replace("MARKER", marker).replace("KEY", str(sysv_key(marker)))
    try:
        judgment = judge.judge_details(f"```python\n{source}```", label)
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
        os.unlink(f"/tmp/{marker}.sock")
    if level == "seccomp":
        remove_traces(marker)  # the seccomp level confines no path (documented)
    assert host_traces(marker) == [], "the run left traces on the host"
    return judgment


@pytest.mark.slow
@pytest.mark.parametrize("level", levels_here())
def test_hostile_and_forging_programs_are_wrong_and_leave_no_trace(level):
    judge = hostile_judge(level, "per_test")
    assert judge.judge(f"```python\n{RIGHT_CALL}```", CALL) is True
    assert judge.judge(f"```python\n{RIGHT_ECHO}```", ECHO) is True
    cases = [(name, program, CALL) for name, program in {**FORGERS, **HOSTILE_CALLS}.items()]
    cases += [(name, program, ECHO) for name, program in HOSTILE_OUTPUTS.items()]
    wrong = {name: judged_wrong(judge, program, label, level) for name, program, label in cases}
    assert {name: j for name, j in wrong.items() if j.verdict is not False} == {}


@pytest.mark.slow
def test_hostile_and_forging_programs_are_wrong_under_the_paper_rules():
    judge = hostile_judge("auto", "paper")
    assert judge.judge(f"```python\n{RIGHT_CALL}```", CALL) is True
    assert judge.judge(f"```python\n{RIGHT_ECHO}```", ECHO) is True
    slow = {"memory spread over processes", "an endless loop", "sleeping past the limit", "a fork bomb"}
    cases = [(name, program, CALL) for name, program in {**FORGERS, **HOSTILE_CALLS}.items() if name not in slow]
    cases += [(name, program, ECHO) for name, program in HOSTILE_OUTPUTS.items() if name not in slow]
    wrong = {name: judged_wrong(judge, program, label, "auto") for name, program, label in cases}
    assert {name: j for name, j in wrong.items() if j.verdict is not False} == {}


LOOKUP = """
import json, os, sys
given = sys.stdin.read()
for root in ["/", "/usr", "/root", "/work", "/home", "/opt", "/tmp", os.path.dirname(os.__file__)] + sys.path:
    for top, dirs, names in os.walk(root, onerror=lambda error: None):
        for name in names:
            if not name.endswith((".jsonl", ".json")):
                continue
            try:
                rows = [json.loads(line) for line in open(os.path.join(top, name))]
            except (OSError, ValueError):
                continue
            for row in rows:
                try:
                    label = json.loads(row["label"])
                    print(label["outputs"][label["inputs"].index(given)], end="")
                    sys.exit(0)
                except (KeyError, TypeError, ValueError):
                    pass
print("not found")
"""


@pytest.mark.parametrize("level", levels_here())
def test_a_program_that_looks_its_input_up_in_the_labels_is_wrong(level):
    if level == "seccomp":
        pytest.skip("the seccomp level confines no path: world-readable labels stay readable there (documented)")
    rows = [json.loads(line) for line in SAMPLE_CODE.read_text().splitlines()]
    stdin_rows = [row for row in rows if "fn_name" not in json.loads(row["label"])][:4]
    for rules in ("per_test", "paper"):
        judge = hostile_judge(level, rules)
        for row in stdin_rows:
            j = judge.judge_details(f"```python\n{LOOKUP}```", row["label"])
            assert (j.verdict, j.reason) == (False, "wrong_answer") and "not found" in j.detail, (rules, j)


def test_the_wrong_answers_of_the_issue_are_wrong_and_the_right_ones_right():
    judge = CodeJudge(CodeJudge.Config(workers=1))
    paper = CodeJudge(CodeJudge.Config(rules="paper", workers=1))
    stdin = lambda want: json.dumps({"inputs": ["\n"], "outputs": [want]})  # noqa: E731
    call = lambda want: json.dumps({"fn_name": "f", "inputs": [[[2, 7, 11, 15], 9]], "outputs": [want]})  # noqa: E731
    cases = [  # (program, label, per_test verdict, paper verdict)
        ("print(-500001)", stdin("-500000\n"), False, True),
        ("print('+500001')", stdin("500000\n"), False, True),
        ("print(float(2880067194370816120))", stdin("2880067194370816120\n"), False, True),
        ("print(-500000)", stdin("-500000\n"), True, True),
        ("print(2880067194370816120)", stdin("2880067194370816120\n"), True, True),
        ("print(0.1 + 0.2)", stdin("0.3\n"), True, True),
        ("def f(nums, target):\n    return 0", call([0, 1]), False, True),  # one index of two_sum
        ("def f(nums, target):\n    return [0, 1]", call([0, 1]), True, True),
        ("def f(nums, target):\n    return [0, 1]", call([[0, 1]]), True, True),
        ("def f(nums, target):\n    return True", call([1]), False, True),
        ("def f(nums, target):\n    return 1", call([True]), False, True),
        ("def f(nums, target):\n    return True", call([True]), True, True),
    ]
    got = [(judge.judge(f"```python\n{p}\n```", label), paper.judge(f"```python\n{p}\n```", label))
           for p, label, _, _ in cases]
    assert got == [(per_test, paper_) for _, _, per_test, paper_ in cases]


PARENT_MEMORY = """
import os
def f(x):
    try:
        os.close(os.open(f"/proc/{os.getppid()}/mem", os.O_RDWR))
    except OSError:
        return x + 39
    return "opened the harness's memory"
"""
CRASH_AFTER_RETURN = """
import os
exit_now = os._exit
os._exit = lambda status: exit_now(1)
def f(x):
    return x + 39
"""


@pytest.mark.parametrize("level", levels_here())
def test_the_harness_is_out_of_the_programs_reach_and_a_crash_after_the_return_fails(level):
    for rules in ("per_test", "paper"):
        judge = hostile_judge(level, rules)
        assert judge.judge(f"```python\n{PARENT_MEMORY}```", CALL) is True, (rules, "/proc/<ppid>/mem opened")
        crash = judge.judge_details(f"```python\n{CRASH_AFTER_RETURN}```", CALL)
        # the paper's judge keeps the results a crashed process reported (docs/verifiers.md)
        expected = ("passed", True) if rules == "paper" else ("runtime_error", False)
        assert (crash.reason, crash.verdict) == expected, (rules, crash)


def random_program(rng: random.Random) -> str:
    """A program from pieces that produce hostile output, return values, errors and exits."""
    pieces = [
        f"import os, sys\nsys.stdout.buffer.write(os.urandom({rng.randrange(1, 1 << 17)}))",
        f"print({rng.choice(['None', repr(rng.random()), '10 ** 5000', repr(chr(rng.randrange(0x110000)))])})",
        f"import os\nos._exit({rng.randrange(256)})",
        f"import os, signal\nos.kill(os.getpid(), {rng.choice([6, 8, 11, 15, 24, 25, 31])})",
        f"raise {rng.choice(['ValueError', 'SystemExit', 'KeyboardInterrupt', 'MemoryError', 'RecursionError'])}()",
        "import os\nfor fd in range(64):\n    try:\n        os.write(fd, os.urandom(64))\n    except OSError:\n"
        "        pass",
        "import os\nos.closerange(0, 64)",
    ]
    returns = ["None", "10 ** 5000", "[[[[[]]]]] * 3", "{1, 2}", "(1, 'x', b'\\xff')", "float('nan')",
               "{(1, 2): [3]}", "object()", "lambda: 0", "'\\udc80'", f"{rng.randrange(-10**30, 10**30)}"]
    body = "\n".join(rng.sample(pieces, rng.randrange(0, 3)))
    indented = textwrap.indent(body, "    ") or "    pass"
    return f"def f(x):\n{indented}\n    return {rng.choice(returns)}\n{body if rng.random() < 0.3 else ''}\n"


@pytest.mark.slow
def test_fuzz_random_programs_never_break_the_judge():
    rng = random.Random(2024)
    label_call = json.dumps({"fn_name": "f", "inputs": [[1]], "outputs": [[token()]]})
    label_stdin = json.dumps({"inputs": ["1\n"], "outputs": [token() + "\n"]})
    for rules in ("per_test", "paper"):
        judge = hostile_judge("auto", rules)
        for _ in range(15):
            program = random_program(rng)
            for label in (label_call, label_stdin):
                response = rng.choice([f"```python\n{program}```", program, "```python\n" + program[:rng.randrange(
                    len(program))], bytes(rng.randrange(256) for _ in range(300)).decode("utf-8", "surrogateescape")])
                judgment = judge.judge_details(response, label)
                assert judgment.verdict is False, (rules, response, judgment)
                judgment.detail.encode("utf-8")  # printable: no lone surrogate
