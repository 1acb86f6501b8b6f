"""Blocking calls into the async rollout engines and teachers, all on one event loop per process.

An HTTP client's session (and its pool of open connections) belongs to the event loop it was made on. The
process's I/O loop runs in a daemon thread for the life of the process, so every blocking call (a rollout
batch with its scoring, a teacher's `score_batch`, a weight sync, a start-up check) runs there and reuses the
connections the previous calls opened, from any calling thread (the trainer's, the rollout-ahead thread). A
client's connections are closed with it: `close()` runs its `aclose()` on that loop.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class AsyncClient(Protocol):
    async def aclose(self) -> None: ...


class BlockingClient:
    """A rollout engine or teacher: its async work runs on the I/O loop, where its connections live."""

    async def aclose(self) -> None:
        """Release the client's connections (HTTP backends; nothing for in-process ones)."""
        return None

    def close(self) -> None:
        """Blocking `aclose()`: the owner of a client closes it when done with it."""
        close_blocking(self)


class _IOLoop:
    """An event loop running forever in a daemon thread."""

    def __init__(self):
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="dnmopd-io", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        async def cancel_pending() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.thread.is_alive():
            asyncio.run_coroutine_threadsafe(cancel_pending(), self.loop).result(timeout=10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)


_io: _IOLoop | None = None
_lock = threading.Lock()


def io_loop() -> asyncio.AbstractEventLoop:
    """The process's I/O loop, started on first use (and anew in a forked child, which has no such thread)."""
    global _io
    with _lock:
        if _io is None or _io.pid != os.getpid():
            _io = _IOLoop()
        return _io.loop


def run_blocking(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` on the process's I/O loop and wait for its result (its exception is raised here). An
    interrupt while waiting (Ctrl-C) cancels the work before it propagates."""
    loop = io_loop()
    if threading.current_thread() is _io.thread:
        work.close()
        raise RuntimeError("run_blocking was called on the I/O loop itself; await the coroutine instead")
    future = asyncio.run_coroutine_threadsafe(work, loop)
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def close_blocking(client: AsyncClient) -> None:
    """Close `client`'s connections (its `aclose()`, on the I/O loop they belong to)."""
    run_blocking(client.aclose())


@atexit.register
def _stop_io_loop() -> None:
    if _io is not None and _io.pid == os.getpid():
        _io.stop()
