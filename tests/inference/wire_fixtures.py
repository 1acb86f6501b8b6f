"""The recorded SGLang / vLLM exchanges (tests/fixtures/wire) and a process replaying them over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

WIRE = Path(__file__).resolve().parents[1] / "fixtures" / "wire"


def load_exchange(name: str) -> dict:
    """A recorded exchange, e.g. `sglang/sglang_02_score_lsl_promptlen_minus1`."""
    return json.loads((WIRE / f"{name}.json").read_text())


class ReplayServer:
    def __init__(self, behavior: str, port: int = 0):
        script = Path(__file__).with_name("replay_server.py")
        self.process = subprocess.Popen(
            [sys.executable, str(script), "--fixtures", str(WIRE), "--behavior", behavior, "--port", str(port)],
            stdout=subprocess.PIPE, text=True,
        )
        line = self.process.stdout.readline()
        if not line.startswith("PORT "):
            self.process.kill()
            raise RuntimeError(f"replay server did not start (behavior {behavior}): {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
