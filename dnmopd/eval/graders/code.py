"""LiveCodeBench: the program of the answer's last fenced block, run on every official test in the sandbox.

Official rules (``lcb_runner``, ``LMStyle.OpenAIChat``): the program is the text between the last two lines
that contain a fence; fewer than two such lines is no program (wrong). Every public and private test runs,
each in a fresh sandboxed process (``dnmopd.sandbox``, never in-process) with 6 s of wall and CPU time and an
8 GiB address space; the answer has ``(6 + 1) * tests + 5`` s for all of them, after which the remaining tests
fail. Standard-input tests compare stripped output lines one to one, exactly or as equal lists of Decimals;
functional tests call the starter code's method (``Solution().fn`` or a module function) with one JSON value
per input line and compare the JSON-decoded return value with the expected value. An answer is correct iff
every test passes; the first failure ends it. A sandbox that cannot run the program, or gives weaker
isolation than asked, stops grading (``GraderError``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from decimal import Decimal, InvalidOperation

from dnmopd.eval.graders.errors import GraderError
from dnmopd.eval.protocol import LCB_MEMORY_BYTES, LCB_TIMEOUT_S, LCB_WORKERS, lcb_deadline_s
from dnmopd.sandbox import (
    Limits,
    PythonRuntime,
    SandboxError,
    isolation_level,
    isolation_rank,
    records,
    run_python,
)

REVISION = "lcb-official-rules-v1"


def extract_code(response: str) -> str | None:
    """The official OpenAIChat extraction: between the last two lines containing a fence; None without."""
    lines = response.split("\n")
    fences = [i for i, line in enumerate(lines) if "```" in line]
    if len(fences) < 2:
        return None
    return "\n".join(lines[fences[-2] + 1:fences[-1]])


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except InvalidOperation:
        return None


def stdout_matches(got: str, want: str) -> bool:
    """The official standard-input comparison."""
    got_lines = [line.strip() for line in got.strip().split("\n")]
    want_lines = [line.strip() for line in want.strip().split("\n")]
    if len(got_lines) != len(want_lines):
        return False
    for a, b in zip(got_lines, want_lines, strict=True):
        if a == b:
            continue
        da, db = _decimals(a), _decimals(b)
        if da is None or db is None or da != db:
            return False
    return True


class LCBGrader:
    def __init__(self, catalog, *, timeout_s: float = LCB_TIMEOUT_S, memory_bytes: int = LCB_MEMORY_BYTES,
                 workers: int = LCB_WORKERS, processes: int = 16, min_isolation: str = "landlock",
                 python: str | None = None):
        self.catalog = catalog
        self.timeout_s, self.workers, self.min_isolation = timeout_s, workers, min_isolation
        self.limits = Limits(cpu_time_s=timeout_s, wall_time_s=timeout_s, memory_bytes=memory_bytes,
                             processes=processes, output_bytes=64 << 20)
        self.runtime = PythonRuntime.of(python)
        available = isolation_level()
        if available == "none" or isolation_rank(available) > isolation_rank(min_isolation):
            raise GraderError(f"the sandbox gives isolation {available!r} here, weaker than {min_isolation!r}; "
                              "LiveCodeBench programs are not run")
        self.revision = f"{REVISION}+timeout{timeout_s:g}s+mem{memory_bytes}"

    def check_coverage(self, rows: Sequence[dict]) -> None:
        """Every question's test file must be there with its catalog hash, else grading does not start."""
        for row in rows:
            self.catalog.lcb_tests(row)

    def grade(self, row: dict, responses: Sequence[str]) -> list[bool]:
        tests = self.catalog.lcb_tests(row)
        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(lambda response: self.passes(tests, response, where=row["id"]), responses))

    def passes(self, tests: dict, response: str, *, where: str = "answer") -> bool:
        """Does the answer's program pass every test of ``tests`` (``{"inputs", "outputs", "fn_name"}``)?"""
        program = extract_code(response)
        if program is None:
            return False
        deadline = time.monotonic() + lcb_deadline_s(len(tests["inputs"]), self.timeout_s)
        for given, expected in zip(tests["inputs"], tests["outputs"], strict=True):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if not self._passes_one(program, tests.get("fn_name"), given, expected, left, where):
                return False
        return True

    def _passes_one(self, program: str, fn_name: str | None, given: str, expected: str, left: float,
                    where: str) -> bool:
        limits = self.limits if left >= self.limits.wall_time_s else replace(
            self.limits, wall_time_s=left, cpu_time_s=left)
        try:
            arguments = [json.loads(line) for line in given.split("\n")] if fn_name else None
            want = json.loads(expected) if fn_name else expected
        except json.JSONDecodeError as exc:
            raise GraderError(f"{where}: a functional test is not JSON ({exc})") from exc
        how = dict(entry="call", fn_name=fn_name, tests=[arguments]) if fn_name else dict(entry="script", stdin=given)
        try:
            result = run_python(program, limits=limits, runtime=self.runtime, **how)
        except SandboxError as exc:
            raise GraderError(f"{where}: the sandbox could not run the program: {exc}") from exc
        if isolation_rank(result.isolation) > isolation_rank(self.min_isolation):
            raise GraderError(f"{where}: the run got isolation {result.isolation!r} ({result.fallback_reason})")
        if fn_name is None:
            if not result.ok:
                return False
            try:
                return stdout_matches(result.stdout_data.decode("utf-8"), want)
            except UnicodeDecodeError:
                return False
        found = records(result)
        if result.limit or not found or found[0].kind != "value":
            return False
        value = found[0].value
        return (list(value) if isinstance(value, tuple) else value) == want  # the official runner lists a tuple
