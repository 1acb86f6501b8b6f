"""Math verifier: the last ``\\boxed{}`` of a response, checked for equivalence with the label.

``grade(response, label, rules)`` is the pure rule. The answer is the content of the response's last
``\\boxed{...}`` (braces balanced); a response whose last ``\\boxed`` is not followed by a closed ``{...}``
(cut off mid-answer, ``\\boxed 5``) has no answer, even when an earlier box is complete. No answer or an
empty label -> False; a label that itself contains ``\\boxed`` is unwrapped the same way. Two rule sets decide
equality (``MathVerifier.Config.rules``):

* ``math_verify`` (the default): both sides parsed by math-verify (LaTeX and plain expressions) and compared
  (string, numeric and symbolic equality, sets and intervals);
* ``paper``: the paper's GRPO math reward, Hendrycks MATH normalisation plus sympy equality
  (``verifiers.math_paper``).

They differ on purpose and are listed in README.md ("Verifiers"); e.g. ``\\boxed{5!}`` for ``120``,
``2^{10}`` for ``1024``, ``\\frac24`` for ``\\frac12`` and ``1, 2, 3`` for ``3, 2, 1`` pass math-verify and fail
the paper's rules; ``1e3`` for ``1000`` is the reverse.

Symbolic comparison can run for minutes (``9^{9^{9^{9}}}``), so ``MathVerifier`` runs ``grade`` in a pool of
persistent worker processes and bounds each answer by ``timeout_s``: a worker that does not answer in time is
killed and replaced, and the verdict is ``None`` (no verdict), never a silent False. A worker that dies or
fails to start also gives ``None``. (The reference scored a timed-out answer False; ``None`` keeps "the
checker failed" apart from "the answer is wrong", and GRPO maps it to reward 0 anyway.)
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import queue
import resource
import threading
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from dnmopd.verifiers import math_paper

logger = logging.getLogger(__name__)

_BOX = "\\boxed"


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (braces balanced); None when the last ``\\boxed`` has no closed
    ``{...}`` right after it, or there is none."""
    start = text.rfind(_BOX)
    if start < 0 or not text.startswith("{", start + len(_BOX)):
        return None
    depth, begin = 0, start + len(_BOX)
    for pos in range(begin, len(text)):
        if text[pos] == "{":
            depth += 1
        elif text[pos] == "}":
            depth -= 1
            if depth == 0:
                return text[begin + 1:pos]
    return None


def _math_verify_equal(answer: str, gold: str) -> bool:
    from math_verify import parse, verify

    if not gold.strip() or not answer.strip():
        return False
    # Time bounds are ours (the worker is killed); math-verify's own SIGALRM timeouts would turn a hang into
    # a silent False.
    gold_parsed = parse(f"{_BOX}{{{gold}}}", parsing_timeout=None)
    answer_parsed = parse(f"{_BOX}{{{answer}}}", parsing_timeout=None)
    return bool(verify(gold_parsed, answer_parsed, timeout_seconds=None))


RULES = {"math_verify": _math_verify_equal, "paper": math_paper.grade}
"""Rule sets: (extracted answer, extracted gold answer) -> equal?"""


def grade(response: str, label: str, rules: str = "math_verify") -> bool:
    """True iff the last boxed answer of ``response`` equals ``label`` under ``rules`` (no time bound)."""
    if rules not in RULES:
        raise ValueError(f"unknown math rules {rules!r} (known: {', '.join(RULES)})")
    if not label:
        return False
    answer = last_boxed(response)
    gold = last_boxed(label) if _BOX in label else label
    if answer is None or gold is None:
        return False
    return RULES[rules](answer, gold)


def _worker_main(conn: multiprocessing.connection.Connection, memory_limit_mb: int, rules: str) -> None:
    """Worker process: import the rules' libraries once, then answer ``(response, label)`` requests until None."""
    if memory_limit_mb:
        limit = memory_limit_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # a runaway bignum raises MemoryError here
    for noisy in ("math_verify", "pylatexenc"):  # both log every answer they cannot parse
        logging.getLogger(noisy).setLevel(logging.ERROR)
    grade("\\boxed{\\sqrt{2}}", "x", rules)  # warm the imports (LaTeX parser, sympy) before announcing readiness

    conn.send(("ready", None))
    while (request := conn.recv()) is not None:
        try:
            conn.send(("ok", grade(*request, rules)))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class _WorkerFailure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Worker:
    """One grader process and the parent's end of its pipe."""

    def __init__(self, context: multiprocessing.context.BaseContext, memory_limit_mb: int, rules: str) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, memory_limit_mb, rules), daemon=True,
                                       name="dnmopd-math-grader")
        self.process.start()
        child.close()
        self.ready = False

    def _receive(self, timeout: float, what: str) -> tuple[str, object]:
        try:
            if not self.conn.poll(timeout):
                raise _WorkerFailure("timeout", f"{what} timed out after {timeout:g} s")
            return self.conn.recv()
        except (EOFError, OSError) as exc:
            raise _WorkerFailure("crash", f"worker died during {what} (exit code {self.process.exitcode})") from exc

    def ask(self, response: str, label: str, *, timeout: float, startup_timeout: float) -> tuple[str, object]:
        """``("ok", verdict)`` or ``("error", message)``; raises _WorkerFailure if the process fails."""
        if not self.ready:
            self._receive(startup_timeout, "start-up")
            self.ready = True
        try:
            self.conn.send((response, label))
        except (OSError, ValueError) as exc:
            raise _WorkerFailure("crash", f"cannot send to worker: {exc}") from exc
        return self._receive(timeout, "grading")

    def stop(self, *, kill: bool) -> None:
        if not kill:
            try:
                self.conn.send(None)
                self.process.join(timeout=5)
            except (OSError, ValueError):
                pass
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


_NEW, _WAIT = object(), object()


class MathVerifier:
    """A pool of killable math-grader processes; ``verify`` is thread-safe."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        workers: int = 4
        """Grader processes (answers graded in parallel)."""
        timeout_s: float = 20.0
        """Wall-clock bound per answer; past it the worker is killed and the verdict is None."""
        startup_timeout_s: float = 180.0
        """Bound on a worker's start-up (importing math-verify and sympy)."""
        memory_limit_mb: int = 4096
        """Address-space limit of each worker (0: none); an answer that exceeds it gets verdict None."""
        rules: str = "math_verify"
        """Equality rules: math_verify (math-verify's parser and comparison) or paper (the paper's GRPO math
        reward: Hendrycks MATH normalisation + sympy); README.md lists where they differ."""

        def __post_init__(self) -> None:
            if self.rules not in RULES:
                raise ValueError(f"MathVerifier.Config.rules must be one of {', '.join(RULES)}, got {self.rules!r}")
            if self.memory_limit_mb < 0:
                raise ValueError(f"MathVerifier.Config.memory_limit_mb must be >= 0, got {self.memory_limit_mb}")
            if self.workers < 1:
                raise ValueError(f"MathVerifier.Config.workers must be >= 1, got {self.workers}")
            for name in ("timeout_s", "startup_timeout_s"):
                if not getattr(self, name) > 0:
                    raise ValueError(f"MathVerifier.Config.{name} must be > 0, got {getattr(self, name)}")

        def build(self) -> MathVerifier:
            return MathVerifier(self)

    def __init__(self, config: MathVerifier.Config | None = None) -> None:
        self.config = config or MathVerifier.Config()
        self._context = multiprocessing.get_context("spawn")
        self._idle: queue.SimpleQueue[_Worker | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = 0
        self._closed = False
        self.failures: Counter[str] = Counter()
        """Counts of ``timeout`` / ``crash`` / ``error`` events, for metrics."""

    def _acquire(self) -> _Worker:
        """An idle worker; a new one while fewer than ``workers`` exist; else wait for one. The idle queue holds
        workers and ``None`` for a free slot (its worker died): taking ``None`` starts a worker in that slot, so a
        waiting caller is woken whether a worker is returned or replaced."""
        with self._lock:
            if self._closed:
                raise RuntimeError("MathVerifier is closed")
            try:
                item = self._idle.get_nowait()
            except queue.Empty:
                item = _NEW if self._started < self.config.workers else _WAIT
                if item is _NEW:
                    self._started += 1
        if item is _WAIT:
            item = self._idle.get()
        if isinstance(item, _Worker):
            return item
        try:
            return self._new_worker()
        except BaseException:
            self._idle.put(None)  # the slot stays free for the next caller
            raise

    def _new_worker(self) -> _Worker:
        return _Worker(self._context, self.config.memory_limit_mb, self.config.rules)

    def verify(self, response: str, label: str) -> bool | None:
        """Verdict for one answer: True / False, or None when the grader timed out or failed."""
        worker = self._acquire()
        try:
            status, value = worker.ask(response, label, timeout=self.config.timeout_s,
                                       startup_timeout=self.config.startup_timeout_s)
        except _WorkerFailure as exc:
            self.failures[exc.kind] += 1
            logger.warning("math grader %s: %s; replacing the worker, verdict None", exc.kind, exc)
            worker.stop(kill=True)
            self._idle.put(None)  # a new worker starts in this slot when next needed
            return None
        self._idle.put(worker)
        if status == "error":
            self.failures["error"] += 1
            logger.warning("math grader raised on a response: %s; verdict None", value)
            return None
        return bool(value)

    def verify_batch(self, pairs: Sequence[tuple[str, str]]) -> list[bool | None]:
        """Verdicts for many ``(response, label)`` pairs, graded in parallel, in input order."""
        if not pairs:
            return []
        with ThreadPoolExecutor(max_workers=min(self.config.workers, len(pairs))) as pool:
            return list(pool.map(lambda pair: self.verify(*pair), pairs))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            started, self._started = self._started, 0
        for _ in range(started):
            try:
                worker = self._idle.get(timeout=self.config.timeout_s + 5)
            except queue.Empty:
                break
            if worker is not None:
                worker.stop(kill=False)

    def __enter__(self) -> MathVerifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
