"""One trainer per run folder: an exclusive lock held by global rank 0 for the life of the run, and workers that
die with their launcher.

The lock is a `flock` on <run_dir>/trainer.lock, which names its holder (host, pid, start time). The kernel
releases it when the holder's process ends, however it ends, so a killed run never leaves a stale lock. The file
itself is never replaced or removed: a lock lives on its inode.

torchrun starts each worker in a session of its own, so a SIGKILL of the launcher alone would leave the workers
training beside the next launch. `die_with_launcher` has the kernel SIGKILL a worker as soon as its launcher
dies (`PR_SET_PDEATHSIG`), before it writes into the run folder again, and the worker's helper processes (e.g.
megatron's multiprocessing server for checkpoint writes) with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import fcntl
import json
import os
import signal
import socket
import sys
from pathlib import Path

LOCK_FILE = "trainer.lock"
_PR_SET_PDEATHSIG = 1


class RunFolderBusy(RuntimeError):
    """Another trainer holds the run folder."""


def die_with_launcher() -> None:
    """Under torchrun (Linux), which starts each worker as the leader of a process group of its own: the kernel
    SIGKILLs this worker as soon as its launcher dies, and a janitor process forked here SIGKILLs the worker's
    group (its helpers) as soon as the worker is gone, however it ended. Call it first, before any thread starts:
    a launcher that dies before the call (the interpreter's start-up) is not noticed, though on a single node
    such a worker cannot join the rendezvous store, which lives in the launcher."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or not sys.platform.startswith("linux") or \
            os.getpgid(0) != os.getpid():
        return
    worker = os.getpid()
    if os.fork() == 0:
        try:
            _janitor(worker)
        finally:
            os._exit(1)  # never back into the launch script
    _on_parent_death(signal.SIGKILL)


def _janitor(worker: int) -> None:
    """Wait in a child of the worker until the worker is gone, then SIGKILL the worker's process group, which this
    process belongs to as well."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    _on_parent_death(signal.SIGUSR1)
    while os.getppid() == worker:
        signal.sigwait({signal.SIGUSR1})
    os.killpg(0, signal.SIGKILL)


def _on_parent_death(signum: int) -> None:
    """Have the kernel send this process `signum` when its parent ends (`PR_SET_PDEATHSIG`)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"prctl(PR_SET_PDEATHSIG): {os.strerror(error)}")


class RunLock:
    """The run folder's lock, taken by global rank 0 (`take`, a collective: every rank raises `RunFolderBusy`
    when another trainer holds it) and released by `release` or the end of the process."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None

    @classmethod
    def take(cls, run_dir: Path) -> RunLock:
        # torch is imported here: the launch script calls die_with_launcher before any heavy import, so that the
        # janitor it forks is a small process
        import torch.distributed as dist

        lock = cls(run_dir)
        refusal = [lock._acquire() if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(refusal, src=0)
        if refusal[0] is not None:
            raise RunFolderBusy(refusal[0])
        return lock

    def _acquire(self) -> str | None:
        """Lock the file and write the holder into it; the refusal naming the holder when another has it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return (f"{self.path.parent} is in use by another trainer ({self._holder()}): a run folder takes one "
                    "trainer at a time; wait for that one to end or stop it, or give this run another run.name")
        holder = {"host": socket.gethostname(), "pid": os.getpid(),
                  "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return None

    def _holder(self) -> str:
        try:
            holder = json.loads(self.path.read_text())
            return f"pid {holder['pid']} on {holder['host']}, started {holder['started']}, holds {self.path}"
        except (OSError, ValueError, TypeError, KeyError):  # written this instant, or by something else
            return f"the holder of {self.path}, which does not name it"

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
