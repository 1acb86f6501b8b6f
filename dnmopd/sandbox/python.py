"""Run a Python program in the sandbox: as a script on stdin, or by calling one of its functions.

A small harness (our code) runs inside the sandbox next to the program. It compiles the program (a syntax
error exits with ``COMPILE_ERROR_EXIT``), optionally executes ``PRELUDE`` first (the stdlib imports the
reference judge puts in front of every program, so that programs relying on them, e.g. using ``deque``
without importing it, behave as they did there), then runs the program as ``__main__``. In call mode it
reads ``{"fn_name", "args"}`` from stdin *before* the program runs, calls ``Solution().<fn_name>`` (when the
program defines ``class Solution``) or the module-level ``<fn_name>``, and writes the JSON of the return
value to the original stdout, which the program itself cannot write to (its prints go to /dev/null). A
first argument that is a JSON object with integer-like keys gets integer keys back (APPS/TACO labels).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass

from dnmopd.sandbox.runner import DEFAULT_LIMITS, Limits, SandboxResult, run

COMPILE_ERROR_EXIT = 90
"""Exit status of the harness when the program does not compile (nothing of it ran)."""

PRELUDE = """\
from string import *
from re import *
from datetime import *
from collections import *
from heapq import *
from bisect import *
from copy import *
from math import *
from random import *
from statistics import *
from itertools import *
from functools import *
from operator import *
from io import *
from sys import *
from json import *
from builtins import *
from typing import *
import string, re, datetime, collections, heapq, bisect, copy, math, random, statistics, itertools
import functools, operator, io, sys, json
sys.setrecursionlimit(600000)
"""

_HARNESS = """\
import builtins, json, os, sys, types
mode, use_prelude = sys.argv[1], sys.argv[2] == "1"
request = json.loads(sys.stdin.read()) if mode == "call" else None
if mode == "call":
    result_fd = os.dup(1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
with open("solution.py", encoding="utf-8", errors="replace") as f:
    source = f.read()
try:
    code = compile(source, "solution.py", "exec")
except (SyntaxError, ValueError) as error:
    print(f"{type(error).__name__}: {error}", file=sys.stderr)
    sys.exit(COMPILE_ERROR_EXIT)
module = types.ModuleType("__main__")
module.__dict__.update(__file__="solution.py", __builtins__=builtins)
sys.modules["__main__"] = module
sys.argv = ["solution.py"]
if use_prelude:
    exec(PRELUDE, module.__dict__)
exec(code, module.__dict__)
if mode == "call":
    solution = module.__dict__.get("Solution")
    target = getattr(solution(), request["fn_name"]) if "class Solution" in source and solution else \\
        module.__dict__[request["fn_name"]]
    args = request["args"]
    if args and isinstance(args[0], dict) and all(k.lstrip("-").isdigit() for k in args[0]):
        args[0] = {int(k): v for k, v in args[0].items()}  # JSON turned integer keys into strings
    payload = json.dumps(target(*args))
    sys.stdout.flush()
    os.write(result_fd, payload.encode())
"""


@dataclass(frozen=True, slots=True)
class PythonRuntime:
    """An interpreter and the host paths it needs inside the sandbox (its prefixes, read-only)."""

    executable: str
    read_only: tuple[str, ...]

    @staticmethod
    @functools.cache
    def of(executable: str | None = None) -> PythonRuntime:
        """The runtime of ``executable`` (default: the interpreter running dnmopd). The interpreter is
        asked for its prefixes once; that runs only the interpreter, never a program under test."""
        executable = executable or sys.executable
        query = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix]))"
        try:
            prefixes = json.loads(subprocess.run([executable, "-I", "-c", query], capture_output=True,
                                                 check=True, timeout=60).stdout)
        except (OSError, subprocess.SubprocessError, ValueError) as error:
            raise ValueError(f"cannot use {executable!r} as the sandbox's Python: {error}") from error
        paths = {os.path.realpath(p) for p in prefixes} | {os.path.dirname(os.path.realpath(executable))}
        return PythonRuntime(executable, tuple(sorted(paths)))


def _harness_source() -> str:
    return (f"COMPILE_ERROR_EXIT = {COMPILE_ERROR_EXIT}\nPRELUDE = {PRELUDE!r}\n" + _HARNESS)


def run_python(source: str, *, stdin: str = "", call: tuple[str, list] | None = None,
               limits: Limits = DEFAULT_LIMITS, runtime: PythonRuntime | None = None, prelude: bool = True,
               isolation: str = "auto") -> SandboxResult:
    """Run ``source`` as a script reading ``stdin``, or, with ``call=(fn_name, args)``, call its function.

    In call mode the result's stdout is the JSON of the return value (empty if the call failed).
    """
    runtime = runtime or PythonRuntime.of()
    mode = "call" if call else "script"
    data = json.dumps({"fn_name": call[0], "args": call[1]}) if call else stdin
    command = [runtime.executable, "-I", "-B", "harness.py", mode, "1" if prelude else "0"]
    files = {"harness.py": _harness_source(), "solution.py": source}
    env = {"PYTHONIOENCODING": "utf-8", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    return run(command, limits=limits, stdin=data, files=files, read_only=runtime.read_only, env=env,
               isolation=isolation)
