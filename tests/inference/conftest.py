"""Fixtures of the inference tests: tiny checkpoints (built once per session) and the reference forward."""

from __future__ import annotations

import pytest
import torch
from sglang_servers import SGLangServer
from tiny_checkpoints import build_qwen3
from wire_fixtures import ReplayServer


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return build_qwen3(tmp_path_factory.mktemp("tiny-qwen3"), seed=0, tied=True)


@pytest.fixture(scope="session")
def tiny_hf_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tiny_sglang(tiny_model_dir, tmp_path_factory):
    """A real SGLang server on the session's tiny tied Qwen3 (fp32), one per test module, always stopped."""
    server = SGLangServer(tiny_model_dir, tmp_path_factory.mktemp("sglang"))
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def replay():
    """`replay(behavior="ok", port=0) -> ReplayServer`; every server started is killed at teardown."""
    servers: list[ReplayServer] = []

    def start(behavior: str = "ok", port: int = 0) -> ReplayServer:
        servers.append(ReplayServer(behavior, port))
        return servers[-1]

    yield start
    for server in servers:
        server.kill()
