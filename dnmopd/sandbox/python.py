"""Run a Python program in the sandbox, with only the standard library in view.

:class:`PythonRuntime` is an interpreter's minimal view: the base interpreter (never a virtual
environment's), its standard library without ``site-packages`` (and without the stdlib's own test suite,
IDLE, tkinter, turtledemo and ensurepip), the shared libraries it and its extension modules load, the
loader's cache, ``/etc/localtime``; optionally some installed distributions (``packages``), importable by
name while the directory they live in stays hidden. No project package or its data is in view.

:func:`run_python` runs a program through the harness (``dnmopd/sandbox/harness.py``): as a script on stdin,
or, with the call, paper and lcb entries, in a child of the harness that reports each test's result to it, one
frame per test in order (see the harness); :func:`records` reads those results back.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from dnmopd.sandbox import harness
from dnmopd.sandbox.harness import COMPILE_ERROR_EXIT, PRELUDE
from dnmopd.sandbox.runner import DEFAULT_LIMITS, Limits, SandboxResult, run

__all__ = ["COMPILE_ERROR_EXIT", "PRELUDE", "Opaque", "PythonRuntime", "Record", "records", "run_python"]

_STDLIB_HIDDEN = ("site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")
_LIBRARY = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")

_QUERY = """\
import json, os, sys, sysconfig
found = {}
for name in sys.argv[1:]:
    from importlib import metadata
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        found[name] = None
        continue
    tops = {f.parts[0] for f in dist.files or () if f.parts and f.parts[0] not in ("..", "__pycache__")}
    found[name] = [str(dist.locate_file(top)) for top in sorted(tops) if not top.endswith((".dist-info", ".egg-info"))]
print(json.dumps({"executable": getattr(sys, "_base_executable", None) or sys.executable,
                  "stdlib": [os.path.dirname(os.__file__)],
                  "dynload": sysconfig.get_config_var("DESTSHARED"), "packages": found}))
"""


@dataclass(frozen=True, slots=True)
class PythonRuntime:
    """An interpreter and the view its programs get (see the module docstring)."""

    executable: str
    """The base interpreter that runs the programs."""
    read_only: tuple[str, ...]
    """Host paths visible read-only."""
    hidden: tuple[str, ...]
    """Directories masked inside them."""
    packages: tuple[tuple[str, str], ...] = ()
    """(import name, path) of each exposed package or module."""
    harness: bytes = b""
    """The harness compiled by this interpreter (a ``.pyc``), so that no run compiles it again."""

    @staticmethod
    @functools.cache
    def of(executable: str | None = None, packages: tuple[str, ...] = ()) -> PythonRuntime:
        """The view of ``executable`` (default: the interpreter running dnmopd) with the distributions
        ``packages`` of that interpreter's environment. Only the trusted interpreter and ``ldd`` run here
        (once per process and arguments), never a program under test."""
        executable = executable or sys.executable
        refused = [name for name in packages if re.sub(r"[-_.]+", "-", name).lower() == "dnmopd"]
        if refused:
            raise ValueError("the sandbox's Python may not import dnmopd: its package data holds the labels")
        try:
            info = json.loads(subprocess.run([executable, "-I", "-c", _QUERY, *packages], capture_output=True,
                                             check=True, timeout=60).stdout)
        except (OSError, subprocess.SubprocessError, ValueError) as error:
            raise ValueError(f"cannot use {executable!r} as the sandbox's Python: {error}") from error
        missing = [name for name, paths in info["packages"].items() if paths is None]
        if missing:
            raise ValueError(f"{executable}: no installed distribution {', '.join(missing)} to expose")
        base = os.path.realpath(info["executable"])
        stdlib = [os.path.realpath(path) for path in info["stdlib"]]
        exposed = [os.path.realpath(path) for paths in info["packages"].values() for path in paths]
        native = [str(path) for directory in [info["dynload"], *exposed] if directory and os.path.isdir(directory)
                  for path in Path(directory).rglob("*.so")] + [path for path in exposed if path.endswith(".so")]
        hidden = [f"{root}/{name}" for root in stdlib for name in _STDLIB_HIDDEN if os.path.isdir(f"{root}/{name}")]
        read_only = {base, *stdlib, *exposed, *_libraries([base, *native])}
        read_only |= {path for path in _SYSTEM_FILES if os.path.exists(path)}
        names = tuple((_import_name(path), path) for path in exposed if _import_name(path))
        return PythonRuntime(base, tuple(sorted(read_only)), tuple(sorted(hidden)), names, _compiled_harness(base))


_COMPILE = ("import importlib.util, marshal, sys\n"
            "code = compile(sys.stdin.read(), 'harness.py', 'exec')\n"
            "sys.stdout.buffer.write(importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code))\n")


def _compiled_harness(executable: str) -> bytes:
    """``harness.py`` as a ``.pyc`` of ``executable`` (magic number, 12 header bytes, the code object)."""
    try:
        return subprocess.run([executable, "-I", "-S", "-c", _COMPILE], input=Path(harness.__file__).read_bytes(),
                              capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as error:
        raise ValueError(f"cannot compile the sandbox harness with {executable!r}: {error}") from error


def _import_name(path: str) -> str | None:
    """The module a distribution's top-level entry provides (``numpy.libs`` and the like provide none)."""
    name = os.path.basename(path).split(".")[0]
    if os.path.isdir(path):
        return name if "." not in os.path.basename(path) and name.isidentifier() else None
    return name if name.isidentifier() and path.endswith((".py", ".so")) else None


def _libraries(binaries: list[str]) -> set[str]:
    """The shared libraries (and the loader) that ``binaries`` load, as ``ldd`` resolves them."""
    try:
        listing = subprocess.run(["ldd", *binaries], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError) as error:
        raise ValueError(f"cannot list the interpreter's shared libraries with ldd: {error}") from error
    return {match.group(1) for match in _LIBRARY.finditer(listing)}


def run_python(source: str, *, entry: str = "script", stdin: str = "", tests: list | None = None,
               fn_name: str | None = None, limits: Limits = DEFAULT_LIMITS, runtime: PythonRuntime | None = None,
               prelude: bool = True, isolation: str = "auto", test_timeout_s: int | None = None) -> SandboxResult:
    """Run ``source`` in the sandbox through the harness.

    ``entry`` is how the program is entered and judged. ``entry="script"``: as ``__main__`` reading ``stdin``.
    ``entry="call"``: its function ``fn_name`` is called with each argument list of ``tests``.
    ``entry="paper"``: as the paper's judge runs it, all ``tests`` in one process (argument lists with
    ``fn_name``, input texts without). ``entry="lcb"``: as LiveCodeBench's official runner, all ``tests`` in one
    process under a ``test_timeout_s`` alarm each (argument lists with ``fn_name``, input texts without; the
    official rules are in the harness). With the call, paper and lcb entries the results are :func:`records` of
    the returned :class:`SandboxResult`. ``prelude`` executes ``PRELUDE`` first (not with lcb, which has its own).
    """
    if entry not in ("script", "call", "paper", "lcb"):
        raise ValueError(f"run_python: unknown entry {entry!r} (script, call, paper or lcb)")
    if entry == "call" and not fn_name:
        raise ValueError("run_python: entry='call' needs fn_name")
    if (entry == "lcb") != (test_timeout_s is not None) or (test_timeout_s is not None and test_timeout_s < 1):
        raise ValueError("run_python: entry='lcb' needs test_timeout_s (whole seconds >= 1), the others take none")
    runtime = runtime or PythonRuntime.of()
    request = {"entry": entry, "prelude": prelude, "fn_name": fn_name, "tests": tests or [],
               "packages": dict(runtime.packages), "output_bytes": limits.output_bytes, "timeout_s": test_timeout_s}
    files = {"harness.pyc": runtime.harness, "solution.py": _source_bytes(source), "request.json": json.dumps(request)}
    command = [runtime.executable, "-I", "-S", "-B", "-X", "utf8", "harness.pyc", "request.json"]
    env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return run(command, limits=limits, stdin=stdin if entry == "script" else "", files=files,
               read_only=runtime.read_only, hidden=runtime.hidden, system_paths=False, env=env,
               isolation=isolation)


def _source_bytes(source: str) -> bytes:
    """A response may hold lone surrogates; they cannot be UTF-8 and become U+FFFD."""
    return source.encode("utf-8", "replace") if isinstance(source, str) else bytes(source)


@dataclass(frozen=True, slots=True)
class Opaque:
    """A returned value of no plain data type; equal to nothing (not even another Opaque)."""

    type_name: str

    def __eq__(self, other) -> bool:
        return False

    def __hash__(self) -> int:
        return id(self)


@dataclass(frozen=True, slots=True)
class Record:
    """One test's result from the harness: ``kind`` is ``value`` (``value`` holds the decoded return
    value), ``stdout`` (``text`` is the captured output), ``error`` (``text`` says why the test ended) or
    ``forged`` (the program wrote into the result channel; nothing after it counts)."""

    index: int
    kind: str
    value: object = None
    text: str = ""


def records(result: SandboxResult) -> list[Record]:
    """The harness's records, in order; an unreadable line ends the list with a ``forged`` record (the
    channel carries only what the harness wrote, so that is a program that broke it, e.g. by killing it)."""
    found, lines = [], result.stdout_data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    for line in lines:
        try:
            index, kind, payload = line.split(b" ", 2)
            data = json.loads(payload)
            found.append(_record(int(index), kind.decode("ascii"), data))
        except (ValueError, RecursionError, TypeError, UnicodeDecodeError, MemoryError) as error:
            found.append(Record(len(found), "forged", text=f"unreadable result line ({type(error).__name__})"))
            break
        if found[-1].index != len(found) - 1:
            found[-1] = Record(len(found) - 1, "forged", text="results out of order")
            break
    return found


def _record(index: int, kind: str, data) -> Record:
    if kind == "value":
        return Record(index, kind, value=decode(data))
    if kind in ("stdout", "error", "forged") and isinstance(data, str):
        return Record(index, kind, text=data)
    raise ValueError(f"record kind {kind!r}")


def decode(data, depth: int = 0):
    """The Python value of ``harness.value_encoder``'s data; a ValueError for anything it cannot have written."""
    if depth > harness.MAX_DEPTH + 1:
        raise ValueError("nested too deeply")
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(item, depth + 1) for item in data]
    if not isinstance(data, dict) or len(data) != 1:
        raise ValueError("not an encoded value")
    (tag, inner), = data.items()
    if tag == "H" and isinstance(inner, str):
        return int(inner, 16)
    if tag == "O" and isinstance(inner, str):
        return Opaque(inner)
    if tag == "B" and isinstance(inner, str):
        return base64.b64decode(inner, validate=True)
    if not isinstance(inner, list):
        raise ValueError(f"tag {tag!r}")
    items = [decode(item, depth + 1) for item in inner]
    if tag == "T":
        return tuple(items)
    if tag == "S":
        return set(items)
    if tag == "F":
        return frozenset(items)
    if tag == "D" and all(isinstance(pair, list) and len(pair) == 2 for pair in items):
        return dict(items)
    raise ValueError(f"tag {tag!r}")
