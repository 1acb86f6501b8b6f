"""LiveCodeBench: the program of the answer's last fenced block, graded by the official runner's rules in
the sandbox.

The rules are those of ``lcb_runner`` (``extract_code`` with ``LMStyle.OpenAIChat``, ``check_correctness``
and ``run_test``) at the commit ``protocol.LCB_RUNNER`` pins; they are re-stated here and in the harness's
``lcb`` entry (``dnmopd/sandbox/harness.py``), never imported, and docs/evaluation.md lists them with the
known differences:

- The program is the text between the last two lines that contain a fence; fewer than two such lines is no
  program (wrong).
- All tests of an answer run in one sandboxed process (``dnmopd.sandbox``, never in-process), in order, each
  under a 6 s alarm, with numpy importable from a read-only view of the installed distribution (network and
  writes outside the private temporary directory still denied) and an 8 GiB address space; the answer has
  ``(6 + 1) * tests + 5`` s in all, after which the tests not reported fail. The first failing test ends the
  answer; it is correct iff every test passes.
- Functional tests call the starter code's method (``Solution().fn`` when the source contains ``class
  Solution``, else the module's function) with each JSON-decoded input line as one argument (dict keys stay
  strings) and compare the return value (a tuple as a list; a numpy scalar as its Python value) with the
  JSON-decoded expected value by ``==``.
- Standard-input tests call the rewritten program with stdin patched as the official runner patches it and
  compare the captured ``sys.stdout`` text with the expected output line by line after stripping, exactly or
  as equal lists of Decimals. ``SystemExit`` (``exit()``, ``sys.exit(1)``) ends a test quietly: its output
  counts whatever the exit status.

A sandbox that cannot run an answer's program, and any other exception while grading it, scores that answer
wrong with the error in its `Verdict`; weaker isolation than asked stops grading (``GraderError``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal, InvalidOperation

from dnmopd.eval.graders.errors import GraderError
from dnmopd.eval.graders.verdict import Verdict, failed
from dnmopd.eval.protocol import LCB_MEMORY_BYTES, LCB_RUNNER, LCB_TIMEOUT_S, LCB_WORKERS, lcb_deadline_s
from dnmopd.sandbox import Limits, PythonRuntime, isolation_level, isolation_rank, records, run_python

REVISION = f"lcb-official-{LCB_RUNNER[1][:8]}-v2"


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
        self.memory_bytes, self.processes = memory_bytes, processes
        self.runtime = PythonRuntime.of(python, ("numpy",))
        available = isolation_level()
        if available == "none" or isolation_rank(available) > isolation_rank(min_isolation):
            raise GraderError(f"the sandbox gives isolation {available!r} here, weaker than {min_isolation!r}; "
                              "LiveCodeBench programs are not run")
        self.revision = f"{REVISION}+timeout{timeout_s:g}s+mem{memory_bytes}"

    def check_coverage(self, rows: Sequence[dict]) -> None:
        """Every question's test file must be there with its catalog hash, else grading does not start."""
        for row in rows:
            self.catalog.lcb_tests(row)

    def grade(self, row: dict, responses: Sequence[str]) -> list[Verdict]:
        tests = self.catalog.lcb_tests(row)
        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(lambda response: self.verdict(tests, response, where=row["id"]), responses))

    def passes(self, tests: dict, response: str) -> bool:
        """Does the answer's program pass every test of ``tests`` (``{"inputs", "outputs", "fn_name"}``)?"""
        return self.verdict(tests, response).correct

    def verdict(self, tests: dict, response: str, *, where: str = "answer") -> Verdict:
        program = extract_code(response)
        if program is None:
            return Verdict(False)
        try:
            return Verdict(self._passes(program, tests, where))
        except GraderError:
            raise
        except Exception as error:  # noqa: BLE001 - one answer's failure is that answer's, grading goes on
            return failed(error, "the LiveCodeBench sandbox run")

    def _passes(self, program: str, tests: dict, where: str) -> bool:
        fn_name, inputs, outputs = tests.get("fn_name"), tests["inputs"], tests["outputs"]
        if len(inputs) != len(outputs):
            raise GraderError(f"{where}: {len(inputs)} test inputs for {len(outputs)} outputs")
        try:
            arguments = [[json.loads(line) for line in given.split("\n")] for given in inputs] if fn_name else None
            expected = [json.loads(want) for want in outputs] if fn_name else outputs
        except json.JSONDecodeError as exc:
            raise GraderError(f"{where}: a functional test is not JSON ({exc})") from exc
        deadline = lcb_deadline_s(len(inputs), self.timeout_s)
        limits = Limits(cpu_time_s=deadline, wall_time_s=deadline, memory_bytes=self.memory_bytes,
                        processes=self.processes, output_bytes=64 << 20)
        result = run_python(program, entry="lcb", fn_name=fn_name, tests=arguments if fn_name else inputs,
                            limits=limits, runtime=self.runtime, test_timeout_s=math.ceil(self.timeout_s))
        if isolation_rank(result.isolation) > isolation_rank(self.min_isolation):
            raise GraderError(f"{where}: the run got isolation {result.isolation!r} ({result.fallback_reason})")
        found = records(result)
        if len(found) < len(inputs):
            return False
        for record, want in zip(found, expected, strict=False):
            if fn_name:
                value = list(record.value) if isinstance(record.value, tuple) else record.value
                if record.kind != "value" or not value == want:
                    return False
            elif record.kind != "stdout" or not stdout_matches(record.text, want):
                return False
        return True
