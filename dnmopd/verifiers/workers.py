"""The verifiers' deadline: a pool of killable grader processes.

``GraderPool(grade, ...)`` runs ``grade(*request)`` (a picklable top-level callable, e.g. a
``functools.partial`` of a module function) in one of ``workers`` persistent processes and returns its result.
A check that does not answer within ``timeout_s`` of reaching its worker gets ``None`` (no verdict) and its
worker is killed and replaced; so do a worker that dies, fails to start within ``startup_timeout_s``, or a
check that raises. ``failures`` counts each kind (``timeout`` / ``crash`` / ``error``). Python cannot stop a
thread, so every check the trainer runs in its own process (math, IF) goes through here: no model output can
hold a verdict past its deadline. (The code judge's programs run in the sandbox, whose limits bound them.)
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import queue
import resource
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

logger = logging.getLogger(__name__)


def _worker_main(conn: multiprocessing.connection.Connection, grade: Callable, memory_limit_mb: int,
                 warmup: tuple) -> None:
    """Worker process: warm the grader's imports once, then answer requests until None."""
    if memory_limit_mb:
        limit = memory_limit_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # a runaway bignum raises MemoryError here
    for noisy in ("math_verify", "pylatexenc"):  # both log every answer they cannot parse
        logging.getLogger(noisy).setLevel(logging.ERROR)
    if warmup:
        grade(*warmup)
    conn.send(("ready", None))
    while (request := conn.recv()) is not None:
        try:
            conn.send(("ok", grade(*request)))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class _WorkerFailure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Worker:
    """One grader process and the parent's end of its pipe."""

    def __init__(self, context, name: str, grade: Callable, memory_limit_mb: int, warmup: tuple) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, grade, memory_limit_mb, warmup),
                                       daemon=True, name=f"dnmopd-{name}-grader")
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

    def ask(self, request: tuple, *, timeout: float, startup_timeout: float) -> tuple[str, object]:
        """``("ok", result)`` or ``("error", message)``; raises _WorkerFailure if the process fails."""
        if not self.ready:
            self._receive(startup_timeout, "start-up")
            self.ready = True
        try:
            self.conn.send(request)
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


class GraderPool:
    """Killable grader processes (see the module docstring); ``grade`` is thread-safe."""

    def __init__(self, grade: Callable, *, name: str, workers: int, timeout_s: float, startup_timeout_s: float,
                 memory_limit_mb: int = 0, warmup: tuple = ()) -> None:
        self.name, self.workers, self.timeout_s, self.startup_timeout_s = name, workers, timeout_s, startup_timeout_s
        self._grade, self._memory_limit_mb, self._warmup = grade, memory_limit_mb, warmup
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
                raise RuntimeError(f"the {self.name} grader pool is closed")
            try:
                item = self._idle.get_nowait()
            except queue.Empty:
                item = _NEW if self._started < self.workers else _WAIT
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
        return _Worker(self._context, self.name, self._grade, self._memory_limit_mb, self._warmup)

    def grade(self, *request):
        """``grade(*request)`` in a worker, or None when it timed out, crashed or raised."""
        worker = self._acquire()
        try:
            status, value = worker.ask(request, timeout=self.timeout_s, startup_timeout=self.startup_timeout_s)
        except _WorkerFailure as exc:
            self.failures[exc.kind] += 1
            logger.warning("%s grader %s: %s; replacing the worker, verdict None", self.name, exc.kind, exc)
            worker.stop(kill=True)
            self._idle.put(None)  # a new worker starts in this slot when next needed
            return None
        self._idle.put(worker)
        if status == "error":
            self.failures["error"] += 1
            logger.warning("%s grader raised on a response: %s; verdict None", self.name, value)
            return None
        return value

    def grade_batch(self, requests: Sequence[tuple]) -> list:
        """``grade`` of many requests, in parallel, in input order."""
        if not requests:
            return []
        with ThreadPoolExecutor(max_workers=min(self.workers, len(requests))) as pool:
            return list(pool.map(lambda request: self.grade(*request), requests))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            started, self._started = self._started, 0
        for _ in range(started):
            try:
                worker = self._idle.get(timeout=self.timeout_s + 5)
            except queue.Empty:
                break
            if worker is not None:
                worker.stop(kill=False)
