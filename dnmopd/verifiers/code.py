"""Code verifier: run the response's program on the label's tests in the native sandbox.

``CodeJudge(config).judge(response, label) -> bool | None`` (and its pooled ``submit``). True: every test passed;
False: a test failed (wrong answer, crash, time or output limit, no program, does not compile); None: no
verdict, because the sandbox itself failed (never a silent False). A malformed label raises ValueError.

**Program.** The last fenced block tagged ``python`` (also ``py``/``python3``, any case; an unclosed last
fence runs to the end of the response), as in the reference judge. Fallbacks, where the reference judge would
run the prose before the first fence: the last untagged fenced block; a response without any fence is the
program itself. A response whose fences are all tagged with other languages has no program (False).

**Tests** (label ``{"inputs": [...], "outputs": [...], "fn_name"?}``): each test runs in a fresh sandboxed
process with the per-test limits (CPU ``test_timeout_s``, wall ``test_wall_timeout_s``); all tests together
must finish within ``total_timeout_s`` of wall time; the first failure ends the judgment. Without
``fn_name`` the program reads the input on stdin and its stdout must match the expected text under the
tolerant rules below. With ``fn_name`` the function (``Solution().fn`` when the program defines ``class
Solution``) is called with the input's arguments (a list, or a string of one JSON value per line) and its
return value must equal the expected value (a JSON string or a value) or that value's first element (the
APPS/TACO one-element wrapper); tuples count as lists, dict keys as strings. Stdin-mode inputs and outputs
given as lists of lines are joined by newlines.

**Tolerant stdout comparison** (``outputs_match``, after the paper's PRIME judge), any of: (a) exact after
stripping the whole text; (b) line by line after stripping every line and dropping empty lines; (c) token
by token (whitespace-separated, in order), where a token pair also matches when both parse as floats that
are close (``|a - b| <= 1e-8 + 1e-5 * |b|``, numpy's ``allclose`` defaults) and are not both plain
integers. The reference judge's last rule (equal *sets* of tokens) is left out on purpose: in its code
that branch never passes, and taken literally it would accept permuted or deduplicated answers.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from dnmopd.sandbox import (
    COMPILE_ERROR_EXIT,
    Limits,
    PythonRuntime,
    SandboxError,
    isolation_level,
    isolation_rank,
    run_python,
)

_PYTHON_TAGS = {"python", "py", "python3"}


def _fenced_blocks(response: str) -> list[tuple[str, str]]:
    """(tag, body) of each fenced block in order. As in the reference judge, a block ends at the next
    fence wherever it stands (not only at a line start), or at the end of the response."""
    blocks, pos = [], 0
    while (start := response.find("```", pos)) >= 0:
        newline = response.find("\n", start)
        if newline < 0:
            break
        info = response[start + 3:newline].split()
        end = response.find("```", newline + 1)
        end = len(response) if end < 0 else end
        blocks.append((info[0].lower() if info else "", response[newline + 1:end]))
        pos = end + 3
    return blocks


def extract_program(response: str) -> str | None:
    """The program to run (see the module docstring), or None when the response has none."""
    blocks = _fenced_blocks(response)
    for wanted in (_PYTHON_TAGS, {""}):
        tagged = [body for tag, body in blocks if tag in wanted]
        if tagged:
            return tagged[-1]
    return None if "```" in response else response


@dataclass(frozen=True, slots=True)
class Tests:
    inputs: list
    outputs: list
    fn_name: str | None


def parse_label(label: str | dict) -> Tests:
    """The label's tests; a ValueError names what is wrong with it."""
    try:
        tests = json.loads(label) if isinstance(label, str) else label
    except json.JSONDecodeError as error:
        raise ValueError(f"code label is not JSON: {error}") from error
    if not isinstance(tests, dict) or not isinstance(tests.get("inputs"), list) or \
            not isinstance(tests.get("outputs"), list):
        raise ValueError("code label must be a JSON object with lists 'inputs' and 'outputs'")
    if not tests["inputs"] or len(tests["inputs"]) != len(tests["outputs"]):
        raise ValueError(f"code label needs as many outputs as inputs, and at least one: "
                         f"{len(tests['inputs'])} inputs, {len(tests['outputs'])} outputs")
    fn_name = tests.get("fn_name")
    if fn_name is not None and (not isinstance(fn_name, str) or not fn_name.isidentifier()):
        raise ValueError(f"code label fn_name must be a Python identifier, got {fn_name!r}")
    return Tests(tests["inputs"], tests["outputs"], fn_name)


def _text(value) -> str:
    """A stdin-mode input or output: lists are joined by newlines (APPS/TACO)."""
    return "\n".join(map(str, value)) if isinstance(value, list) else str(value)


def _is_close(got: str, want: str) -> bool:
    if got.isdigit() and want.isdigit():
        return False  # integers must match exactly
    try:
        a, b = float(got), float(want)
    except ValueError:
        return False
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-8 + 1e-5 * abs(b)


def outputs_match(got: str, want: str) -> bool:
    """The tolerant stdout comparison (see the module docstring)."""
    if got.strip() == want.strip():
        return True
    lines = [line.strip() for line in got.splitlines() if line.strip()]
    if lines == [line.strip() for line in want.splitlines() if line.strip()]:
        return True
    got_tokens, want_tokens = got.split(), want.split()
    return len(got_tokens) == len(want_tokens) and all(
        a == b or _is_close(a, b) for a, b in zip(got_tokens, want_tokens, strict=True))


def _label_json(text: str, what: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"code label: call-based {what} {text[:80]!r} is not JSON ({error})") from error


def _call_arguments(value) -> list:
    """A call-based input: a list of arguments, or a string of one JSON value per line (APPS)."""
    if isinstance(value, str):
        return [_label_json(line, "input line") for line in value.split("\n")]
    return list(value)


def returns_match(got, want) -> bool:
    """Call-based comparison of a JSON-decoded return value with the expected value."""
    want = _label_json(want, "output") if isinstance(want, str) else want
    want = json.loads(json.dumps(want))  # tuples -> lists, int keys -> str, as the return value went
    return got == want or (isinstance(want, list) and len(want) > 0 and got == want[0])


@dataclass(frozen=True, slots=True)
class Judgment:
    """A verdict and why: ``passed``, ``no_program``, ``compile_error``, ``runtime_error``, ``time_limit``,
    ``memory_limit``, ``output_limit``, ``wrong_answer`` or ``infrastructure`` (verdict None)."""

    verdict: bool | None
    reason: str
    failed_test: int | None = None
    detail: str = ""


class CodeJudge:
    """Judges code responses in parallel: ``workers`` threads, each driving sandboxed processes, behind a
    queue of ``queue_size`` waiting judgments (``submit`` blocks while it is full)."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        workers: int = 4
        """Judgments run at once (each runs one sandboxed process at a time)."""
        queue_size: int = 64
        """Judgments waiting for a worker; ``submit`` blocks beyond that."""
        test_timeout_s: float = 5.0
        """CPU seconds for one test (the reference judge's per-test limit; whole seconds, rounded up)."""
        test_wall_timeout_s: float = 10.0
        """Wall seconds for one test: stops sleeping or blocked programs. Kept above test_timeout_s so that a
        busy machine, which stretches wall time but not CPU time, does not fail correct programs."""
        total_timeout_s: float = 30.0
        """Wall seconds for all tests of one judgment together; past it the program fails."""
        memory_bytes: int = 1 << 30
        """Address space of each process of the program, and resident memory of all of them together."""
        max_processes: int = 8
        """Processes and threads the program may have at once."""
        output_bytes: int = 16 << 20
        """stdout kept per test; more output fails the test."""
        python: str = ""
        """Interpreter for the programs; empty: the one running dnmopd. Its prefixes are mounted read-only."""
        prelude: bool = True
        """Execute the reference judge's stdlib import block before each program."""
        min_isolation: str = "landlock"
        """Weakest sandbox level accepted (``namespaces`` > ``landlock`` > ``seccomp``); checked when the
        judge is built and on every run."""
        limits: Limits = field(init=False)

        def __post_init__(self):
            for name in ("workers", "max_processes"):
                if getattr(self, name) < 1:
                    raise ValueError(f"CodeJudge.Config.{name} must be >= 1, got {getattr(self, name)}")
            if self.queue_size < 0:
                raise ValueError(f"CodeJudge.Config.queue_size must be >= 0, got {self.queue_size}")
            if not 0 < self.test_timeout_s <= self.test_wall_timeout_s <= self.total_timeout_s:
                raise ValueError(f"CodeJudge.Config needs 0 < test_timeout_s <= test_wall_timeout_s <= "
                                 f"total_timeout_s, got {self.test_timeout_s}, {self.test_wall_timeout_s} and "
                                 f"{self.total_timeout_s}")
            try:
                isolation_rank(self.min_isolation)
                self.limits = Limits(cpu_time_s=self.test_timeout_s, wall_time_s=self.test_wall_timeout_s,
                                     memory_bytes=self.memory_bytes, processes=self.max_processes,
                                     output_bytes=self.output_bytes)
            except ValueError as error:
                raise ValueError(f"CodeJudge.Config: {error}") from error

    def __init__(self, config: Config | None = None):
        self.config = config or CodeJudge.Config()
        self.runtime = PythonRuntime.of(self.config.python or None)
        available = isolation_level()
        if available == "none" or isolation_rank(available) > isolation_rank(self.config.min_isolation):
            raise SandboxError(f"this machine's sandbox gives isolation {available!r}, weaker than "
                               f"CodeJudge.Config.min_isolation={self.config.min_isolation!r} (see "
                               f"`dnmopd-sandbox --probe`); lower min_isolation only on a machine you trust")
        self._pool = ThreadPoolExecutor(self.config.workers, thread_name_prefix="code-judge")
        self._slots = threading.BoundedSemaphore(self.config.workers + self.config.queue_size)

    def judge(self, response: str, label: str | dict) -> bool | None:
        """One verdict, in the calling thread."""
        return self.judge_details(response, label).verdict

    def judge_details(self, response: str, label: str | dict) -> Judgment:
        tests = parse_label(label)
        program = extract_program(response)
        if program is None:
            return Judgment(False, "no_program")
        deadline = time.monotonic() + self.config.total_timeout_s
        for index, (given, expected) in enumerate(zip(tests.inputs, tests.outputs, strict=True)):
            left = deadline - time.monotonic()
            if left <= 0:
                return Judgment(False, "time_limit", index, "all tests together took too long")
            try:
                judgment = self._run_test(program, tests.fn_name, given, expected, index, left)
            except SandboxError as error:
                return Judgment(None, "infrastructure", index, str(error))
            if judgment is not None:
                return judgment
        return Judgment(True, "passed")

    def _run_test(self, program: str, fn_name: str | None, given, expected, index: int,
                  left: float) -> Judgment | None:
        limits = self.config.limits
        if left < limits.wall_time_s:
            limits = replace(limits, wall_time_s=left, cpu_time_s=min(left, limits.cpu_time_s))
        call = (fn_name, _call_arguments(given)) if fn_name else None
        result = run_python(program, stdin="" if call else _text(given), call=call, limits=limits,
                            runtime=self.runtime, prelude=self.config.prelude)
        if isolation_rank(result.isolation) > isolation_rank(self.config.min_isolation):
            raise SandboxError(f"the run got isolation {result.isolation!r} ({result.fallback_reason})")
        if result.limit in ("wall", "cpu"):
            return Judgment(False, "time_limit", index, f"{result.limit} limit")
        if result.limit in ("output", "memory"):
            return Judgment(False, f"{result.limit}_limit", index)
        if result.exit_code == COMPILE_ERROR_EXIT and not result.stdout:
            return Judgment(False, "compile_error", index, result.stderr[-2000:])
        if not result.ok:
            return Judgment(False, "runtime_error", index, result.stderr[-2000:] or str(result.signal_name))
        if call:
            try:
                returned = json.loads(result.stdout)
            except json.JSONDecodeError:  # the program wrote into the result channel itself
                return Judgment(False, "wrong_answer", index, f"not a JSON result: {result.stdout[:200]!r}")
            matched = returns_match(returned, expected)
        else:
            matched = outputs_match(result.stdout, _text(expected))
        return None if matched else Judgment(False, "wrong_answer", index, result.stdout[:2000])

    def submit(self, response: str, label: str | dict) -> Future:
        """Queue a judgment; the future's result is its verdict. Blocks while the queue is full."""
        return self._submit(self.judge, response, label)

    def submit_details(self, response: str, label: str | dict) -> Future:
        """Like :meth:`submit`; the future's result is a :class:`Judgment`."""
        return self._submit(self.judge_details, response, label)

    def _submit(self, fn, response, label) -> Future:
        self._slots.acquire()
        try:
            future = self._pool.submit(fn, response, label)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _: self._slots.release())
        return future

    def judge_many(self, pairs: Iterable[tuple[str, str | dict]]) -> list[bool | None]:
        """Verdicts of many ``(response, label)`` pairs, in order."""
        return [future.result() for future in [self.submit(response, label) for response, label in pairs]]

    def close(self):
        self._pool.shutdown(wait=True)

    def __enter__(self) -> CodeJudge:
        return self

    def __exit__(self, *exc):
        self.close()
