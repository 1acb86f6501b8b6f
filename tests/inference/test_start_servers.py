"""launch/start_servers.py with stand-in server executables (replay servers behind the real command lines):
health wait, server map, scoring through the map, clean stop, and failures that stop everything; and once
end to end with a real SGLang server."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from sglang_servers import STARTUP_TIMEOUT_S, SGLangServer
from wire_fixtures import WIRE

from dnmopd.serving.pool import ReplicaPool
from dnmopd.serving.servers import read_server_map
from dnmopd.teachers.sglang import SGLangTeacher

SCRIPT = Path(__file__).resolve().parents[2] / "launch" / "start_servers.py"
REPLAY = Path(__file__).with_name("replay_server.py")


def stand_in(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(tmp_path, python, ports, timeout=60):
    servers = [
        {"name": "math_teacher", "backend": "sglang", "model_path": "<tiny-qwen3>", "port": ports[0], "python": python,
         "extra_args": ["--mem-fraction-static", "0.35"]},
        {"name": "math_teacher", "backend": "sglang", "model_path": "<tiny-qwen3>", "port": ports[1], "python": python},
        {"name": "code_teacher", "backend": "vllm", "model_path": "<tiny-qwen3>", "port": ports[2], "python": python,
         "env": {"VLLM_SERVER_DEV_MODE": "1"}},
    ]
    config = {"servers": servers, "map_path": str(tmp_path / "map.json"), "log_dir": str(tmp_path / "logs"),
              "health_timeout_s": timeout}
    path = tmp_path / "teachers.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run_script(config_path):
    return subprocess.Popen([sys.executable, str(SCRIPT), "--config", str(config_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, process, timeout=30):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "server map never appeared"
        time.sleep(0.1)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_start_wait_map_score_and_stop(tmp_path):
    python = stand_in(tmp_path, "server", f'exec "{sys.executable}" "{REPLAY}" --fixtures "{WIRE}" "$@"')
    ports = [free_port() for _ in range(3)]
    config_path = write_config(tmp_path, python, ports)
    process = run_script(config_path)
    try:
        wait_for(tmp_path / "map.json", process)
        server_map = read_server_map(tmp_path / "map.json")
        assert server_map["math_teacher"] == {"backend": "sglang", "path": "<tiny-qwen3>",
                                              "servers": [f"http://127.0.0.1:{p}" for p in ports[:2]]}
        assert server_map["code_teacher"]["servers"] == [f"http://127.0.0.1:{ports[2]}"]
        entry = server_map["math_teacher"]
        teacher = SGLangTeacher.Config(name="math_teacher", model_path=entry["path"], vocab_size=1024,
                                       pool=ReplicaPool.Config(urls=entry["servers"])).build()
        teacher.check()  # both replicas healthy and serving the expected model
        process.send_signal(signal.SIGTERM)
        stdout, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0 and "all servers stopped" in stdout
    assert not (tmp_path / "map.json").exists()
    assert not any(port_open(p) for p in ports)
    logs = sorted(os.listdir(tmp_path / "logs"))
    assert logs == sorted(f"{n}-{p}.log" for n, p in zip(["math_teacher"] * 2 + ["code_teacher"], ports, strict=True))


def test_a_server_that_dies_at_start_stops_the_others(tmp_path):
    good = stand_in(tmp_path, "server", f'exec "{sys.executable}" "{REPLAY}" --fixtures "{WIRE}" "$@"')
    bad = stand_in(tmp_path, "broken", "echo 'CUDA out of memory while loading'; exit 3")
    ports = [free_port() for _ in range(3)]
    config = yaml.safe_load(write_config(tmp_path, good, ports).read_text())
    config["servers"][2]["python"] = bad
    (tmp_path / "teachers.yaml").write_text(yaml.safe_dump(config))
    process = run_script(tmp_path / "teachers.yaml")
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert "code_teacher exited with 3" in stderr and "CUDA out of memory while loading" in stderr
    assert not (tmp_path / "map.json").exists() and not any(port_open(p) for p in ports)


def test_config_errors_name_the_key(tmp_path):
    path = tmp_path / "teachers.yaml"
    path.write_text(json.dumps({"servers": [{"name": "m", "backend": "tgi", "model_path": "/m", "port": 1}]}))
    process = run_script(path)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2 and "backend='tgi'" in stderr and "teachers.yaml" in stderr


def test_wrong_types_are_reported(tmp_path):
    path = tmp_path / "teachers.yaml"
    path.write_text(yaml.safe_dump({"servers": [{"name": "m", "backend": "vllm", "model_path": "/m", "port": 1}],
                                    "map_path": 3}))
    process = run_script(path)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2 and "map_path: expected a string" in stderr


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_real_sglang_teacher_end_to_end(tmp_path, tiny_model_dir):
    """The script starts a real SGLang server (CPU) from its YAML; the teacher found through the map scores
    like transformers; SIGTERM stops it and removes the map."""
    from tiny_checkpoints import reference_logprobs
    from transformers import AutoModelForCausalLM

    from dnmopd.teachers.base import ScoreRequest

    port = free_port()
    server = SGLangServer(tiny_model_dir, tmp_path, name="math_teacher", port=port)  # the tests' server flags
    spec = {"name": "math_teacher", "backend": "sglang", "model_path": str(tiny_model_dir), "port": port,
            "python": server.spec.python, "device": "cpu", "extra_args": server.spec.extra_args,
            "env": server.spec.env}
    path = tmp_path / "teachers.yaml"
    path.write_text(yaml.safe_dump({"servers": [spec], "map_path": str(tmp_path / "map.json"),
                                    "log_dir": str(tmp_path / "logs"), "health_timeout_s": STARTUP_TIMEOUT_S}))
    process = run_script(path)
    try:
        wait_for(tmp_path / "map.json", process, timeout=STARTUP_TIMEOUT_S)
        entry = read_server_map(tmp_path / "map.json")["math_teacher"]
        assert entry["servers"] == [f"http://127.0.0.1:{port}"]
        teacher = SGLangTeacher.Config(name="math_teacher", model_path=entry["path"],
                                       pool=ReplicaPool.Config(urls=entry["servers"])).build()
        teacher.check()
        ids = list(range(300, 340))
        scores = teacher.score_batch([ScoreRequest(ids, 12)])[0].logprobs
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
        torch.testing.assert_close(scores.double(), reference_logprobs(model, ids)[11:], atol=2e-5, rtol=0)
        process.send_signal(signal.SIGTERM)
        stdout, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0 and "all servers stopped" in stdout
    assert not (tmp_path / "map.json").exists() and not port_open(port)
