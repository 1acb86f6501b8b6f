"""Code verifier: run the response's program on the label's tests in the native sandbox.

``CodeJudge(config).judge(response, label) -> bool | None`` (and its pooled ``submit``). True: every test
passed; False: a test failed (wrong answer, crash, time or other limit, no program, does not compile, a forged
result); None: no verdict, because the sandbox itself failed (never a silent False). A malformed label
raises ValueError (``parse_label``, which the data loader uses to validate code labels). Model output never
raises: any bytes, size or nesting in a program's output or return value is a verdict.

**Programs see no label.** They run on the bare interpreter in a minimal view (``PythonRuntime``: the
standard library without site-packages, no project package or data); the expected outputs never enter the
sandbox: the comparison happens here.

**Two rule sets** (``CodeJudge.Config.rules``; docs/verifiers.md lists every difference):

- ``per_test`` (default). Program: the last fenced block tagged ``python`` (also ``py``/``python3``, any
  case; an unclosed last fence runs to the end of the response); else the last untagged fenced block; a
  response without any fence is the program itself; one whose fences are all tagged with other languages
  has none. Each test runs in a fresh sandboxed process under the per-test limits (CPU ``test_timeout_s``,
  wall ``test_wall_timeout_s``), all of them within ``total_timeout_s``; the first failure ends the
  judgment. Stdin tasks compare stdout, call-based tasks (``fn_name``; ``Solution().fn`` when the program
  defines ``class Solution``) the return value, by the exact rules of ``dnmopd.verifiers.code_compare``.
- ``paper``: the paper's judge (reference-behavior 6.3). Program: ``response.split("```python")[-1]
  .split("```")[0]``. All tests in one sandboxed run under a 6 s global wall limit and the reference's 5 s
  alarm per test, executed as the reference does (its import block and ``reliability_guard``, stdin programs
  rewritten into ``code()`` with stdin patched, see ``dnmopd.sandbox.harness``), compared by its rules.

**Labels** ``{"inputs": [...], "outputs": [...], "fn_name"?}``: stdin tasks give strings or lists of lines
(joined by newlines); call-based tasks give argument lists or strings of one JSON value per line, and
expected values or their JSON text. Under ``paper`` a list-valued input or output is first rewritten as the
paper's judge rewrites it (``paper_label_text``): a stdin input list ``["a"]`` is the text ``"a"`` with its
quotes, and a one-element expected list ``[[1, 2]]`` the value ``[1, 2]``.
"""

from __future__ import annotations

import json
import keyword
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
    SandboxResult,
    isolation_level,
    isolation_rank,
    records,
    run_python,
)
from dnmopd.verifiers.code_compare import outputs_match, paper_outputs_match, paper_returns_match, returns_match

RULES = ("per_test", "paper")
PAPER_TIMEOUT_S = 6.0
"""The paper's global limit for all tests of one judgment (its per-test alarm is 5 s)."""
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
    """The ``per_test`` program (see the module docstring), or None when the response has none."""
    blocks = _fenced_blocks(response)
    for wanted in (_PYTHON_TAGS, {""}):
        tagged = [body for tag, body in blocks if tag in wanted]
        if tagged:
            return tagged[-1]
    return None if "```" in response else response


def paper_program(response: str) -> str:
    """The reference judge's program: after the last ```` ```python ````, up to the next fence (the prose
    before the first fence when there is no such block, the whole response when there is no fence)."""
    return response.split("```python")[-1].split("```")[0]


@dataclass(frozen=True, slots=True)
class Tests:
    """A label's tests, normalized: stdin tasks have input and expected texts, call-based tasks argument
    lists and expected values."""

    inputs: list
    outputs: list
    fn_name: str | None


def _unique_keys(pairs: list) -> dict:
    keys = [key for key, _ in pairs]
    duplicated = sorted({key for key in keys if keys.count(key) > 1})
    if duplicated:
        raise ValueError(f"duplicate key {duplicated[0]!r}")
    return dict(pairs)


def _json(text: str, where: str):
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"code label: {where} is not JSON ({error}): {text[:80]!r}") from error


def _text(value, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value)
    raise ValueError(f"code label: {where} must be a string or a list of strings, got {type(value).__name__}")


def _call_arguments(value, where: str) -> list:
    if isinstance(value, str):
        return [_json(line, f"{where} line {number}") for number, line in enumerate(value.split("\n"), 1)]
    if not isinstance(value, list):
        raise ValueError(f"code label: {where} must be a list of arguments or JSON lines, got {type(value).__name__}")
    try:
        json.dumps(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"code label: {where} holds a value that is not JSON ({error})") from error
    return list(value)


def parse_label(label: str | dict, rules: str = "per_test") -> Tests:
    """The label's tests, read as ``rules`` read them (see ``paper_label_text``); a ValueError names the field
    at fault."""
    data = _json(label, "the label") if isinstance(label, str) else label
    if not isinstance(data, dict):
        raise ValueError(f"code label must be a JSON object with 'inputs' and 'outputs', got {type(data).__name__}")
    for name in ("inputs", "outputs"):
        if name not in data:
            raise ValueError(f"code label: missing field '{name}'")
        if not isinstance(data[name], list):
            raise ValueError(f"code label: '{name}' must be a list, got {type(data[name]).__name__}")
    inputs, outputs, fn_name = data["inputs"], data["outputs"], data.get("fn_name")
    if not inputs or len(inputs) != len(outputs):
        raise ValueError(f"code label needs as many outputs as inputs, and at least one: {len(inputs)} inputs, "
                         f"{len(outputs)} outputs")
    if fn_name is not None and (not isinstance(fn_name, str) or not fn_name.isidentifier()
                                or keyword.iskeyword(fn_name)):
        raise ValueError(f"code label: 'fn_name' must be a plain Python identifier, got {str(fn_name)[:80]!r}")
    if rules == "paper":
        inputs = [paper_label_text(v, "input") for v in inputs]
        outputs = [paper_label_text(v, "output") for v in outputs]
    if fn_name is None:
        return Tests([_text(v, f"inputs[{i}]") for i, v in enumerate(inputs)],
                     [_text(v, f"outputs[{i}]") for i, v in enumerate(outputs)], None)
    return Tests([_call_arguments(v, f"inputs[{i}]") for i, v in enumerate(inputs)],
                 [_json(v, f"outputs[{i}]") if isinstance(v, str) else v for i, v in enumerate(outputs)], fn_name)


def paper_label_text(value, field: str):
    """The paper's judge's rewrite of a list-valued test field before it runs the tests (reference-behavior
    5.5): an input list becomes the JSON text of each element, one per line; an output list the JSON text
    of its only element, or of the whole list. Anything else is left as it is."""
    if not isinstance(value, list):
        return value
    if field == "input":
        return "\n".join(json.dumps(item) for item in value)
    return json.dumps(value[0] if len(value) == 1 else value)


def _printable(text: str, limit: int = 2000) -> str:
    """Model output for a log line: cut, and without lone surrogates (which no UTF-8 stream can write)."""
    return text[:limit].encode("utf-8", "replace").decode("utf-8")


@dataclass(frozen=True, slots=True)
class Judgment:
    """A verdict and why: ``passed``, ``no_program``, ``compile_error``, ``runtime_error``, ``time_limit``,
    ``memory_limit``, ``output_limit``, ``disk_limit``, ``file_size_limit``, ``wrong_answer`` or
    ``infrastructure`` (verdict None)."""

    verdict: bool | None
    reason: str
    failed_test: int | None = None
    detail: str = ""


def _ended_early(result: SandboxResult, index: int) -> Judgment:
    """Why the run gave no result for test ``index``."""
    if result.limit in ("wall", "cpu"):
        return Judgment(False, "time_limit", index, f"{result.limit} limit")
    if result.limit:
        return Judgment(False, f"{result.limit}_limit", index)
    if result.signal_name == "SIGALRM":
        return Judgment(False, "time_limit", index, "the reference judge's per-test alarm")
    if result.exit_code == COMPILE_ERROR_EXIT:
        return Judgment(False, "compile_error", index, _printable(result.stderr[-2000:]))
    return Judgment(False, "runtime_error", index, _printable(result.stderr[-2000:] or str(result.signal_name)))


class CodeJudge:
    """Judges code responses in parallel: ``workers`` threads, each driving sandboxed processes, behind a
    queue of ``queue_size`` waiting judgments (``submit`` blocks while it is full)."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        rules: str = "per_test"
        """How programs are extracted, run and compared: ``per_test`` (each test in its own sandboxed run
        under the limits below, exact comparison) or ``paper`` (the paper's judge: its extraction, all tests
        in one run under its 6 s global limit and 5 s per-test alarm, its comparison rules; ``test_timeout_s``,
        ``test_wall_timeout_s``, ``total_timeout_s`` and ``prelude`` do not apply). docs/verifiers.md
        lists every difference."""
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
        """Processes and threads the program may have at once (the judge's harness takes one more)."""
        output_bytes: int = 16 << 20
        """stdout kept per run; more output fails the test."""
        python: str = ""
        """Interpreter for the programs; empty: the one running dnmopd. Programs run on its base interpreter
        (never a virtual environment) and see only its standard library."""
        python_packages: list[str] = field(default_factory=list)
        """Installed distributions of ``python``'s environment the programs may import (e.g. ``[numpy]``);
        empty: the standard library only. ``dnmopd`` is refused (its package data holds labels)."""
        prelude: bool = True
        """Execute the reference judge's stdlib import block before each program."""
        min_isolation: str = "landlock"
        """Weakest sandbox level accepted (``namespaces`` > ``landlock`` > ``seccomp``); checked when the
        judge is built and on every run."""
        isolation: str = "auto"
        """The level runs ask for: ``auto`` (the strongest this machine allows) or a level, at least
        ``min_isolation`` (to test a level, or to avoid one that misbehaves on a machine)."""
        limits: Limits = field(init=False)

        def __post_init__(self):
            if self.rules not in RULES:
                raise ValueError(f"CodeJudge.Config.rules must be one of {', '.join(RULES)}, got {self.rules!r}")
            for name in ("workers", "max_processes"):
                if getattr(self, name) < 1:
                    raise ValueError(f"CodeJudge.Config.{name} must be >= 1, got {getattr(self, name)}")
            if self.queue_size < 0:
                raise ValueError(f"CodeJudge.Config.queue_size must be >= 0, got {self.queue_size}")
            if not 0 < self.test_timeout_s <= self.test_wall_timeout_s <= self.total_timeout_s:
                raise ValueError(f"CodeJudge.Config needs 0 < test_timeout_s <= test_wall_timeout_s <= "
                                 f"total_timeout_s, got {self.test_timeout_s}, {self.test_wall_timeout_s} and "
                                 f"{self.total_timeout_s}")
            if not all(isinstance(name, str) and name for name in self.python_packages):
                raise ValueError(f"CodeJudge.Config.python_packages must be distribution names, got "
                                 f"{self.python_packages!r}")
            try:
                isolation_rank(self.min_isolation)
                if self.isolation != "auto" and isolation_rank(self.isolation) > isolation_rank(self.min_isolation):
                    raise ValueError(f"isolation {self.isolation!r} is weaker than min_isolation "
                                     f"{self.min_isolation!r}")
                wall = PAPER_TIMEOUT_S if self.rules == "paper" else self.test_wall_timeout_s
                cpu = PAPER_TIMEOUT_S if self.rules == "paper" else self.test_timeout_s
                self.limits = Limits(cpu_time_s=cpu, wall_time_s=wall, memory_bytes=self.memory_bytes,
                                     processes=self.max_processes + 1, output_bytes=self.output_bytes)
            except ValueError as error:
                raise ValueError(f"CodeJudge.Config: {error}") from error

        def build(self) -> CodeJudge:
            return CodeJudge(self)

    def __init__(self, config: Config | None = None):
        self.config = config or CodeJudge.Config()
        self.runtime = PythonRuntime.of(self.config.python or None, tuple(self.config.python_packages))
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
        tests = parse_label(label, self.config.rules)
        try:
            if self.config.rules == "paper":
                return self._judge_paper(paper_program(response), tests)
            return self._judge_per_test(extract_program(response), tests)
        except SandboxError as error:
            return Judgment(None, "infrastructure", None, str(error))

    def _run(self, program: str, limits: Limits, **how) -> SandboxResult:
        result = run_python(program, limits=limits, runtime=self.runtime, isolation=self.config.isolation, **how)
        if isolation_rank(result.isolation) > isolation_rank(self.config.min_isolation):
            raise SandboxError(f"the run got isolation {result.isolation!r} ({result.fallback_reason})")
        return result

    def _judge_per_test(self, program: str | None, tests: Tests) -> Judgment:
        if program is None:
            return Judgment(False, "no_program")
        deadline = time.monotonic() + self.config.total_timeout_s
        for index, (given, expected) in enumerate(zip(tests.inputs, tests.outputs, strict=True)):
            left = deadline - time.monotonic()
            if left <= 0:
                return Judgment(False, "time_limit", index, "all tests together took too long")
            limits = self.config.limits
            if left < limits.wall_time_s:
                limits = replace(limits, wall_time_s=left, cpu_time_s=min(left, limits.cpu_time_s))
            judgment = self._one_test(program, tests.fn_name, given, expected, index, limits)
            if judgment is not None:
                return judgment
        return Judgment(True, "passed")

    def _one_test(self, program: str, fn_name: str | None, given, expected, index: int,
                  limits: Limits) -> Judgment | None:
        prelude = self.config.prelude
        if fn_name is None:
            result = self._run(program, limits, entry="script", stdin=given, prelude=prelude)
            if result.limit or not result.ok:
                return _ended_early(result, index)
            try:
                text = result.stdout_data.decode("utf-8")
            except UnicodeDecodeError:
                return Judgment(False, "wrong_answer", index, "the output is not UTF-8 text")
            return None if outputs_match(text, expected) else Judgment(False, "wrong_answer", index, _printable(text))
        result = self._run(program, limits, entry="call", fn_name=fn_name, tests=[given], prelude=prelude)
        found = records(result)
        if result.limit:
            return _ended_early(result, index)
        if not found:
            return _ended_early(result, index) if not result.ok else \
                Judgment(False, "wrong_answer", index, "the program ended without its function returning")
        if found[0].kind == "value" and not result.ok:  # ended badly after returning, as a crashing script does
            return _ended_early(result, index)
        return self._check_record(found[0], expected, returns_match, index)

    def _judge_paper(self, program: str, tests: Tests) -> Judgment:
        result = self._run(program, self.config.limits, entry="paper", fn_name=tests.fn_name, tests=tests.inputs,
                           prelude=True)
        found = records(result)
        compare = paper_returns_match if tests.fn_name else paper_outputs_match
        for index, expected in enumerate(tests.outputs):
            if index >= len(found):
                return _ended_early(result, index)
            judgment = self._check_record(found[index], expected, compare, index)
            if judgment is not None:
                return judgment
        return Judgment(True, "passed")

    @staticmethod
    def _check_record(record, expected, compare, index: int) -> Judgment | None:
        """None when the test's record matches ``expected``, else why not."""
        if record.kind == "error":
            return Judgment(False, "runtime_error", index, _printable(record.text))
        if record.kind == "forged":
            return Judgment(False, "wrong_answer", index, f"forged result: {_printable(record.text)}")
        got = record.value if record.kind == "value" else record.text
        if compare(got, expected):
            return None
        shown = record.text if record.kind == "stdout" else "the returned value differs"
        return Judgment(False, "wrong_answer", index, _printable(shown))

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
