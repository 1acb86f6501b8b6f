"""The harness that runs a Python program inside the sandbox (shipped there compiled, as ``harness.pyc``;
standard library only, it runs on the bare interpreter of the minimal view).

``python -I -S -B -X utf8 harness.pyc request.json`` with ``request.json`` = ``{"entry", "prelude", "packages",
"fn_name", "tests", "output_bytes", "timeout_s"}``; the program is ``solution.py``. The ``entry`` says how the
program is entered and judged:

- ``script``: the program runs as ``__main__`` on the real stdin and stdout (one test per run).
- ``call``: its function ``fn_name`` (``Solution().fn_name`` when it defines ``class Solution``) is called
  once per entry of ``tests`` (lists of arguments).
- ``paper``: the reference judge's way (PRIME ``testing_util``): the program and the reference import block
  form one module ``tmp_sol``; the reference's ``reliability_guard`` is applied; every test runs in the same
  process under a 5 s alarm; with ``fn_name`` the function is called (``tests`` are argument lists), without
  it the program is rewritten into a function ``code()`` and called with stdin and ``open`` patched as the
  reference patches them (``tests`` are input texts) and its printed output captured.
- ``lcb``: LiveCodeBench's official runner (``lcb_runner``'s ``run_test``, pinned in the section of that name
  below): every test in the same process under a ``timeout_s`` alarm, argument lists with ``fn_name`` (no
  key conversion), input texts without it (the program rewritten into ``wrapped_function()``, stdin and
  ``open`` patched as the official runner patches them, the printed output captured).

With the ``call``, ``paper`` and ``lcb`` entries this process (the trusted half, which never runs program code)
forks the child that runs the program. The child reports each test's result over a pipe, one frame per test in
order, and this process writes a line ``<test> <kind> <JSON>`` per frame to stdout, which the child cannot reach:
its stdin and stdout are /dev/null and the sandbox's stdout is a socket, which /proc cannot reopen. Kinds: ``value``
(a return value, see ``value_encoder``), ``stdout`` (captured output), ``error`` (the exception that ended the
test). A frame says nothing a program could not say by returning: the program shares the child's memory with the
code that writes the frames, so no secret there could authenticate them, and none is used. What a frame can claim is
fixed here instead: its test is the next one (a frame for another test, of an unknown kind, over the size cap
``output_bytes`` or holding a newline or a non-ASCII byte ends the run with a ``forged`` line), and the run ends as
the child ended, which the judge reads too. Before the program is loaded the child enters a Landlock domain of its
own (``_fence_off_parent``), so that it cannot open this process's ``/proc/<pid>/mem`` or attach to it. This process
then ends as the child did.
"""

import io
import json
import os
import sys
import types

COMPILE_ERROR_EXIT = 90
"""Exit status when the program does not compile (nothing of it ran)."""

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
import string
import re
import datetime
import collections
import heapq
import bisect
import copy
import math
import random
import statistics
import itertools
import functools
import operator
import io
import sys
import json
sys.setrecursionlimit(6*10**5)
"""
"""The reference judge's import block, executed before each program (``prelude``)."""

PAPER_TEST_TIMEOUT_S = 5
"""The reference judge's per-test alarm (its default action ends the whole run)."""

MAX_DEPTH = 400
"""Nesting depth of a return value that is still encoded; deeper values are opaque."""

_HEADER_SIZE = 13  # kind (1 byte), test index (4, little-endian), payload length (8)
_KINDS = {1: b"value", 2: b"stdout", 3: b"error"}


def value_encoder():
    """``encode(value) -> str``: a return value as JSON text that keeps its Python type: JSON's own types as
    themselves, big integers as ``{"H": hex}``, tuples ``{"T": [...]}``, dicts ``{"D": [[key, value],
    ...]}``, sets ``{"S": [...]}``, frozensets ``{"F": [...]}``, bytes ``{"B": base64}``, anything else
    ``{"O": type name}``; subclasses count as their base type (their own methods are not asked). Made before
    the program runs, from the interpreter's own functions, so that a program that rebinds names
    (``json.dumps``, ``builtins.type``, ``os.write``) changes nothing of it."""
    from _json import encode_basestring_ascii as quote
    from binascii import b2a_base64 as to_base64

    kind_of, subclass, has, join = type, issubclass, hasattr, str.join
    as_str, as_float, as_int, int_text, float_text, hex_text = str.__str__, float.__float__, int.__index__, \
        int.__repr__, float.__repr__, hex
    special = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}

    def integer(number):
        return int_text(number) if number.bit_length() <= 10000 else '{"H":"' + hex_text(number) + '"}'

    def items(tag, values, depth):
        parts = []
        for item in values:
            parts.append(encode(item, depth + 1))
        text = "[" + join(",", parts) + "]"
        return text if tag is None else '{"' + tag + '":' + text + "}"

    def encode(value, depth=0):
        kind = kind_of(value)
        if depth > MAX_DEPTH:
            return '{"O":"nested too deeply"}'
        if value is None or kind is bool:
            return "null" if value is None else "true" if value else "false"
        if subclass(kind, str):
            return quote(as_str(value))
        if subclass(kind, float):
            text = float_text(as_float(value))
            return special.get(text, text)
        if subclass(kind, int):
            return integer(as_int(value))
        if subclass(kind, list):
            return items(None, list.__iter__(value), depth)
        if subclass(kind, tuple):
            return items("T", tuple.__iter__(value), depth)
        if subclass(kind, dict):
            parts = []
            for key, item in dict.items(value):
                parts.append("[" + encode(key, depth + 1) + "," + encode(item, depth + 1) + "]")
            return '{"D":[' + join(",", parts) + "]}"
        if subclass(kind, frozenset):
            return items("F", frozenset.__iter__(value), depth)
        if subclass(kind, set):
            return items("S", set.__iter__(value), depth)
        if subclass(kind, (bytes, bytearray)):
            return '{"B":"' + to_base64(value, newline=False).decode("ascii") + '"}'
        if has(kind, "__index__"):  # numpy's integers, for one
            number = value.__index__()
            if kind_of(number) is int:
                return integer(number)
        return '{"O":' + quote(as_str(kind.__name__)) + "}"

    return encode


def _reporter(fd, cap):
    """The child's side of the result channel: ``(send_value(index, value), send_text(index, kind, text))``,
    made before the program runs and bound to what they use (see ``value_encoder``)."""
    from _json import encode_basestring_ascii as quote

    write, encode, length, view_of, to_bytes, byte = os.write, value_encoder(), len, memoryview, int.to_bytes, bytes

    def send(index, kind, payload, too_large):
        data = (payload if length(payload) <= cap else too_large).encode("ascii")
        header = byte((kind,)) + to_bytes(index, 4, "little") + to_bytes(length(data), 8, "little")
        view = view_of(header + data)
        while view:
            view = view[write(fd, view):]

    def send_value(index, value):
        send(index, 1, encode(value), '{"O":"too large"}')

    def send_text(index, kind, text):
        send(index, kind, quote(text), '"<too large>"')

    return send_value, send_text


def _fence_off_parent():
    """Puts this process (the child, before the program is loaded) in a Landlock domain nested in its parent's:
    the kernel then refuses it ptrace access to the parent, so ``/proc/<ppid>/mem`` cannot be opened. The
    ruleset handles only the making of block devices, which the sandbox never allows, so no file access
    changes. Kernels without Landlock (before 5.13) leave the parent open (docs/verifiers.md)."""
    import ctypes

    syscall = ctypes.CDLL(None, use_errno=True).syscall
    syscall.restype = ctypes.c_long
    handled = ctypes.c_uint64(1 << 11)  # struct landlock_ruleset_attr {handled_access_fs = MAKE_BLOCK}
    ruleset = syscall(444, ctypes.byref(handled), ctypes.c_size_t(8), ctypes.c_uint32(0))  # create_ruleset
    if ruleset >= 0:
        syscall(446, ctypes.c_int(ruleset), ctypes.c_uint32(0))  # landlock_restrict_self
        os.close(ruleset)


def _reliability_guard(exit_builtin, blocked_modules):
    """The judges' reliability_guard (the reference judge's and the official LiveCodeBench runner's, which differ
    only in ``exit`` and the blocked modules): destructive ``os``/``shutil`` functions and ``subprocess.Popen``
    become None, ``quit`` and ``help`` too, ``exit`` becomes `exit_builtin`, the `blocked_modules` cannot be
    imported."""
    import builtins
    import faulthandler
    import shutil
    import subprocess

    faulthandler.disable()
    builtins.exit, builtins.quit, builtins.help = exit_builtin, None, None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork",
                 "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown",
                 "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir"):
        setattr(os, name, None)
    shutil.rmtree = shutil.move = shutil.chown = None
    subprocess.Popen = None
    for name in blocked_modules:
        sys.modules[name] = None


def _paper_guard():
    """The reference judge's reliability_guard: ``exit`` is None too, ``subprocess`` and ``ctypes`` blocked."""
    _reliability_guard(None, ("ipdb", "joblib", "resource", "psutil", "tkinter", "subprocess", "ctypes"))


def paper_stdin_program(source):
    """The reference judge's rewrite of a stdin program: a final ``if __name__ == '__main__':`` block is
    unwrapped, every line that does not start with ``from``/``import`` is indented into ``def code():``."""
    import ast

    try:
        tree = ast.parse(source)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            source = ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    except Exception:  # the reference leaves the program as it is
        pass
    out, started = "", False
    for line in source.split("\n"):
        line = line + "\n" if line.startswith(("from ", "import ")) else "\t" + line + "\n"
        if line.startswith("\t") and not started:
            out += "stdin = sys.stdin\nstdout = sys.stdout\ndef code():\n" + line
            started = True
        elif started and line.startswith(("from ", "import ")):
            out += "\t" + line
        else:
            out += line
    return out


def _paper_call_stdin(method, text):
    """Calls ``code()`` as the reference judge does: stdin and ``open`` patched, SystemExit swallowed."""
    from unittest.mock import mock_open, patch  # imported before the guard, as in the reference

    lines = iter(text.split("\n"))

    @patch("builtins.open", mock_open(read_data=text))
    @patch("sys.stdin", io.StringIO(text))
    @patch("sys.stdin.readline", lambda *args: next(lines))
    @patch("sys.stdin.readlines", lambda *args: text.split("\n"))
    @patch("sys.stdin.read", lambda *args: text)
    def call():
        try:
            return method()
        except SystemExit:
            pass

    return call()


def _load(source, request):
    """Compiles and executes the program as a module; returns it (exits on a compile error)."""
    paper = request["entry"] == "paper"
    if paper and not request["fn_name"]:
        source = paper_stdin_program(source)
    if paper and request["prelude"]:
        source = PRELUDE + source
    try:
        code = compile(source, "solution.py", "exec")
    except (SyntaxError, ValueError) as error:
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        os._exit(COMPILE_ERROR_EXIT)
    module = types.ModuleType("tmp_sol" if paper else "solution")
    module.__dict__.update(__file__="solution.py")
    sys.modules[module.__name__] = sys.modules["__main__"] = module  # the harness is nobody's to import
    if request["prelude"] and not paper:
        exec(PRELUDE, module.__dict__)
    exec(code, module.__dict__)
    return module


def _target(module, source, fn_name):
    solution = module.__dict__.get("Solution")
    holder = solution() if "class Solution" in source and solution is not None else module
    return getattr(holder, fn_name)


def _arguments(args, paper):
    """JSON turned integer keys into strings: a first argument that is a dict with integer-like keys gets
    them back (APPS/TACO labels). The reference judge then passes that dict alone."""
    if args and isinstance(args[0], dict):
        try:
            converted = {int(k): v for k, v in args[0].items()}
        except ValueError:
            return args
        return [converted] if paper else [converted, *args[1:]]
    return args


def _child(request, source, send_value, send_text):
    """Runs the program and reports every test (the untrusted half); never returns."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    import signal

    paper, fn_name, index = request["entry"] == "paper", request["fn_name"], 0
    try:
        if paper:
            import unittest.mock  # noqa: F401 - needs modules the guard removes

            _paper_guard()
        module = _load(source, request)
        method = _target(module, source, fn_name) if fn_name else module.code
        for index, test in enumerate(request["tests"]):
            if paper:
                signal.alarm(PAPER_TEST_TIMEOUT_S)
            if fn_name:
                send_value(index, method(*_arguments(test, paper)))
            else:
                send_text(index, 2, _captured(method, test))
            if paper:
                signal.alarm(0)
    except BaseException as error:  # noqa: BLE001 - the program's error ends its run, as in the reference
        send_text(index, 3, f"{type(error).__name__}: {error}"[-2000:])
        os._exit(1)
    os._exit(0)


def _captured(method, text):
    saved, sys.stdout = sys.stdout, io.StringIO()
    try:
        _paper_call_stdin(method, text)
        return sys.stdout.getvalue()
    finally:
        sys.stdout = saved


def _relay(read_fd, tests, cap, child):
    """Copies the child's frames to stdout as lines while the child runs; returns its wait status."""
    import select
    import signal

    out, buffer, expected, status = sys.stdout.buffer, bytearray(), 0, None
    while True:
        ready, _, _ = select.select([read_fd], [], [], 0.05)
        chunk = os.read(read_fd, 1 << 16) if ready else b""
        buffer += chunk
        while len(buffer) >= _HEADER_SIZE:
            kind = buffer[0]
            index, length = int.from_bytes(buffer[1:5], "little"), int.from_bytes(buffer[5:13], "little")
            header_ok = kind in _KINDS and index == expected < len(tests)
            if header_ok and length <= cap and len(buffer) < _HEADER_SIZE + length:
                break
            payload = bytes(buffer[_HEADER_SIZE:_HEADER_SIZE + length])
            if not header_ok or length > cap or b"\n" in payload or not payload.isascii():
                out.write(b"%d forged %s\n" % (expected, json.dumps("a result frame the harness did not write "
                                                                     "(kind, order, size or bytes)").encode()))
                out.flush()
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
                os._exit(0)
            out.write(b"%d %s %s\n" % (index, _KINDS[kind], payload))
            del buffer[:_HEADER_SIZE + length]
            expected += 1
        out.flush()
        if status is None:
            done, status = os.waitpid(child, os.WNOHANG)
            status = status if done else None
        if (ready and not chunk) or (status is not None and not ready):
            break  # end of the pipe, or the child is gone and nothing is left (its own children may hold it)
    return status if status is not None else os.waitpid(child, 0)[1]


def _end_as(status):
    """Ends this process the way the child ended."""
    import signal

    sys.stdout.flush()
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _run_script(source, request):
    try:
        code = compile(source, "solution.py", "exec")
    except (SyntaxError, ValueError) as error:
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(COMPILE_ERROR_EXIT)
    module = types.ModuleType("__main__")
    module.__dict__.update(__file__="solution.py")
    sys.modules["__main__"] = module
    sys.argv = ["solution.py"]
    if request["prelude"]:
        exec(PRELUDE, module.__dict__)
    exec(code, module.__dict__)


class _Packages:
    """Finds the distributions the judge exposed (their parent directory stays hidden)."""

    def __init__(self, locations):
        self.locations = locations

    def find_spec(self, name, path=None, target=None):
        import importlib.util

        location = self.locations.get(name)
        if location is None or path is not None:
            return None
        if os.path.isdir(location):
            return importlib.util.spec_from_file_location(name, os.path.join(location, "__init__.py"),
                                                          submodule_search_locations=[location])
        return importlib.util.spec_from_file_location(name, location)


# ------------------------------------------------------------------------------------------------------------
# entry "lcb": LiveCodeBench's official runner, lcb_runner/evaluation/testing_util.py (``run_test``) at
# LiveCodeBench/LiveCodeBench@28fef95ea8c9f7a547c8329f2cd3d32b92c1fa24, re-stated here (see docs/evaluation.md).

LCB_PRELUDE = PRELUDE.rsplit("sys.setrecursionlimit", 1)[0] + "sys.setrecursionlimit(50000)\n"
"""The official import block: the reference judge's imports with a recursion limit of 50,000."""

LCB_INT_DIGITS = 50000
"""``sys.set_int_max_str_digits`` of the official grading process (``compute_code_generation_metrics``)."""


class TimeoutException(Exception):  # noqa: N818 - the official name, which a program may catch or print
    """Raised by the per-test alarm, as the official runner's alarm handler does."""


def _lcb_alarm(signum, frame):
    print("timeout occured: alarm went off")  # the official handler's words, into the captured output
    raise TimeoutException


def lcb_stdin_program(source):
    """The official rewrite of a standard-input program: a last top-level ``if __name__ == '__main__':`` is
    replaced by its body; then the top-level imports stay at module level after ``LCB_PRELUDE`` and every
    other top-level statement becomes the body of ``wrapped_function()``. Source that does not parse is
    returned as it is (and then fails to compile)."""
    import ast

    try:
        tree = ast.parse(source)
        if isinstance(tree.body[-1], ast.If) and \
                ast.unparse(tree.body[-1].test).strip() == "__name__ == '__main__'":
            source = ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(tree.body[-1].body)
    except Exception:  # noqa: BLE001 - the official rewrite keeps the program then
        pass
    try:
        tree = ast.parse(source)
        imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        others = [node for node in tree.body if not isinstance(node, (ast.Import, ast.ImportFrom))]
        extra = {"type_params": []} if sys.version_info >= (3, 12) else {}  # as Python 3.11 builds it
        wrapped = ast.FunctionDef(name="wrapped_function", args=ast.arguments(
            posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]), body=others, decorator_list=[],
            lineno=-1, **extra)
        return LCB_PRELUDE + "\n" + ast.unparse(imports) + "\n" + ast.unparse(wrapped)
    except Exception:  # noqa: BLE001
        return source


class _LcbStdin:
    """What ``sys.stdin`` is during an official standard-input test: ``read()`` and ``readlines()`` give the
    whole input (lines without their newlines), ``readline()`` and ``input()`` read it line by line,
    ``buffer.read()`` gives its bytes and ``buffer.readline()`` always its first line; other attributes
    are a ``StringIO``'s; it is not iterable."""

    def __init__(self, text):
        self._text, self._lines = text, io.StringIO(text)
        self.buffer = _LcbStdinBuffer(text.encode("utf-8"))

    def read(self, *args):
        return self._text

    def readline(self, *args):
        return self._lines.readline(*args)

    def readlines(self, *args):
        return self._text.split("\n")

    def __getattr__(self, name):
        return getattr(self._lines, name)


class _LcbStdinBuffer:
    def __init__(self, data):
        self._data = data

    def read(self, *args):
        return self._data

    def readline(self, *args):
        return self._data.split(b"\n")[0] + b"\n"


def _lcb_call_stdin(method, text):
    """Calls ``wrapped_function`` as the official runner does: ``open`` is a mock file of the input;
    ``read``/``readline``/``readlines`` of the process's own stdin object (which ``from sys import *``
    bound before) are patched over (``readline`` yields the input's lines without newlines); ``sys.stdin`` is
    an ``_LcbStdin``; SystemExit ends the test quietly."""
    from contextlib import ExitStack
    from unittest.mock import mock_open, patch

    lines = iter(text.split("\n"))
    with ExitStack() as patches:
        patches.enter_context(patch.object(sys.stdin, "read", lambda *args: text))
        patches.enter_context(patch.object(sys.stdin, "readlines", lambda *args: text.split("\n")))
        patches.enter_context(patch.object(sys.stdin, "readline", lambda *args: next(lines)))
        patches.enter_context(patch("sys.stdin", _LcbStdin(text)))
        patches.enter_context(patch("builtins.open", mock_open(read_data=text)))
        try:
            method()
        except SystemExit:
            pass


def _lcb_guard():
    """The official ``reliability_guard()`` (no memory limit): ``exit`` stays (it raises SystemExit, as the site
    module's does)."""

    class _Exit:
        def __repr__(self):
            return "Use exit() or Ctrl-D (i.e. EOF) to exit"

        def __call__(self, code=None):
            try:
                sys.stdin.close()
            except Exception:  # noqa: BLE001 - as the site module's exit
                pass
            raise SystemExit(code)

    _reliability_guard(_Exit(), ("ipdb", "joblib", "resource", "psutil", "tkinter"))


def _lcb_plain(value):
    """A numpy scalar as the Python scalar it compares equal to (the official runner compares the object)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):
        return value.item()
    return value


def _lcb_child(request, source, send_value, send_text):
    """Runs every test in this process as the official runner does (the untrusted half); never returns.
    Functional: the import block and the program form module ``tmp_sol`` (``Solution()`` is built when the
    source contains ``class Solution``), the function is called with each test's argument list. Standard
    input: ``lcb_stdin_program``'s ``wrapped_function()`` is called per test with stdin patched
    (``_lcb_call_stdin``) and ``sys.stdout`` captured. Each test (and the module's execution) runs under a
    ``timeout_s`` alarm; the first exception ends the run."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    import signal
    import unittest.mock  # noqa: F401 - needs modules the guard removes

    fn_name, timeout, index = request["fn_name"], request["timeout_s"], 0
    try:
        import numpy  # noqa: F401 - the official process has imported it
    except ImportError:
        pass
    sys.set_int_max_str_digits(LCB_INT_DIGITS)
    signal.signal(signal.SIGALRM, _lcb_alarm)
    try:
        _lcb_guard()
        code = LCB_PRELUDE + "\n\n" + source if fn_name else lcb_stdin_program(source)
        module = types.ModuleType("tmp_sol", "")
        sys.modules["__main__"] = module  # the harness is nobody's to import
        signal.alarm(timeout)
        exec(compile(code, "solution.py", "exec"), module.__dict__)
        holder = module.Solution() if "class Solution" in code else module
        signal.alarm(0)
        method = getattr(holder, fn_name or "wrapped_function")
        for index, test in enumerate(request["tests"]):
            if fn_name:
                signal.alarm(timeout)
                value = method(*test)
                signal.alarm(0)
                send_value(index, _lcb_plain(value))
                continue
            captured, saved = io.StringIO(), sys.stdout
            captured.close = lambda x: 1  # the official capture cannot be closed (close() itself fails)
            sys.stdout = captured
            try:
                signal.alarm(timeout)
                _lcb_call_stdin(method, test)
            finally:
                signal.alarm(0)
                sys.stdout = saved
            send_text(index, 2, captured.getvalue())
    except BaseException as error:  # noqa: BLE001 - the program's error ends its run, as in the official runner
        signal.alarm(0)
        send_text(index, 3, f"{type(error).__name__}: {error}"[-2000:])
        os._exit(1)
    os._exit(0)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        request = json.load(f)
    with open("solution.py", encoding="utf-8", errors="replace") as f:
        source = f.read()
    if request["packages"]:
        sys.meta_path.append(_Packages(request["packages"]))
    if request["entry"] == "script":
        _run_script(source, request)
        return
    read_fd, write_fd = os.pipe()
    cap = request["output_bytes"]
    child = os.fork()
    if child == 0:
        os.close(read_fd)
        _fence_off_parent()
        run = _lcb_child if request["entry"] == "lcb" else _child
        run(request, source, *_reporter(write_fd, cap))
    os.close(write_fd)
    _end_as(_relay(read_fd, request["tests"], cap, child))


if __name__ == "__main__":
    main()
