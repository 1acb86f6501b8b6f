"""The vLLM CPU environment that `make vllm-env` builds, and a vLLM server on it for the tests.

The environment is `$DNMOPD_VLLM_ENV` (set by `make test`), else the versioned default folder the Makefile
names after its recipe (`VLLM_RECIPE`), so a test never runs on an environment of an older recipe.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import pytest
from distributed import free_port

from dnmopd.serving.servers import ServerProcess, ServerSpec

REPO = Path(__file__).resolve().parents[1]


def vllm_env() -> Path:
    if os.environ.get("DNMOPD_VLLM_ENV"):
        return Path(os.environ["DNMOPD_VLLM_ENV"])
    recipe = re.search(r"^VLLM_RECIPE := (\S+)$", (REPO / "Makefile").read_text(), re.MULTILINE).group(1)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "dnmopd", recipe)


def vllm_python() -> Path:
    """The environment's interpreter; skips the test (fails it under CI) when the environment is not built."""
    env = vllm_env()
    if not (env / ".complete").is_file():
        message = f"no vLLM environment at {env}: run `make vllm-env`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return env / "bin" / "python"


@contextlib.contextmanager
def vllm_server(model_dir: Path, work: Path, *, dtype: str, max_model_len: int = 256, name: str = "tiny"):
    """A vLLM server (eager, 1 GiB KV cache, weight reloads allowed) on `model_dir`, stopped on exit."""
    spec = ServerSpec(
        name=name, backend="vllm", model_path=str(model_dir), port=free_port(), python=str(vllm_python()),
        dtype=dtype, extra_args=["--max-model-len", str(max_model_len), "--enforce-eager"],
        env={"VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CACHE_ROOT": str(work / "cache"),
             "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor"), "OMP_NUM_THREADS": "2"},
    )
    server = ServerProcess(spec, work / "server.log").start()
    try:
        server.wait_healthy(timeout_s=600)  # 1-2 min on 2 free cores; several when they are shared
        yield server
    finally:
        server.stop()
