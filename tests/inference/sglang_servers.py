"""Real SGLang servers for the integration tests: SGLang 0.5.23 from `make sglang-env` on the CPU.

`SGLangServer` runs one server through the project's own launcher (`dnmopd.serving.servers`, `device: cpu`)
on a free port; `kill()` is a crash (SIGKILL of the whole process group), `restart()` starts it again on
the same port, as a supervisor would. One server at a time: every test module starts its own and stops it
in a finalizer.
"""

from __future__ import annotations

import os
import random
import signal
import socket
from pathlib import Path

import pytest

from dnmopd.serving.servers import ServerProcess, ServerSpec

CONTEXT_LENGTH = 256
STARTUP_TIMEOUT_S = 600


def sglang_python() -> Path:
    root = os.environ.get("DNMOPD_SGLANG_ENV") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "dnmopd", "sglang-0.5.23-cpu-r1"
    )
    return Path(root) / "bin" / "python"


def require_sglang() -> Path:
    """The environment's interpreter; a missing environment skips (fails in CI, where `make test` makes it)."""
    python = sglang_python()
    if not (python.parent.parent / ".complete").exists():
        message = f"no SGLang environment at {python.parent.parent}: run `make sglang-env`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return python


def free_port() -> int:
    """A free port below the kernel's ephemeral range (32768+): a client retrying a restarting server on an
    ephemeral port can connect to itself and hold the port, so the server cannot bind it again."""
    for port in random.Random().sample(range(20000, 32000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32000")


class SGLangServer:
    def __init__(self, model_path: Path, work: Path, *, name: str = "tiny", port: int | None = None,
                 context_length: int = CONTEXT_LENGTH):
        self.work = work
        self.spec = ServerSpec(
            name=name, backend="sglang", model_path=str(model_path), port=port or free_port(),
            python=str(require_sglang()), device="cpu",
            extra_args=["--skip-server-warmup", "--context-length", str(context_length), "--max-total-tokens",
                        "16384", "--mem-fraction-static", "0.05"],
            env={"OMP_NUM_THREADS": "2", "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor"),
                 "SGLANG_CACHE_DIR": str(work / "sglang-cache")},
        )
        self.process: ServerProcess | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return self.spec.url

    def start(self) -> SGLangServer:
        self.starts += 1
        self.process = ServerProcess(self.spec, self.work / f"{self.spec.name}-{self.starts}.log").start()
        try:
            self.process.wait_healthy(timeout_s=STARTUP_TIMEOUT_S)
        except BaseException:
            self.process.stop()
            raise
        return self

    def kill(self) -> None:
        """A crash: SIGKILL the server's process group and wait for it."""
        process = self.process.process
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def restart(self) -> SGLangServer:
        """Kill (if still running) and start again on the same port and model, as a supervisor would."""
        self.kill()
        return self.start()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
