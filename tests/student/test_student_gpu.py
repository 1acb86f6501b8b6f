"""GPU checks of the student (skipped without CUDA); the lead's H200 run uses gpu_check.py directly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_check_passes(tmp_path):
    script = Path(__file__).with_name("gpu_check.py")
    proc = subprocess.run([sys.executable, str(script), "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=1200)
    report = json.loads((tmp_path / "student_gpu_check.json").read_text())
    assert proc.returncode == 0 and report["failed"] == [], proc.stdout[-4000:]
