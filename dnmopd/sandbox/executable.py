"""Where the native sandbox executable is: installed with the package, or named by ``DNMOPD_SANDBOX``."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VARIABLE = "DNMOPD_SANDBOX"
"""Path of a ``dnmopd-sandbox`` to use instead of the installed one (e.g. a ``cmake --build`` output)."""

INSTALLED = Path(__file__).resolve().parent.parent / "_bin" / "dnmopd-sandbox"


class SandboxError(RuntimeError):
    """The sandbox could not run the program (missing executable, setup failure, unreadable report)."""


class SandboxNotInstalledError(SandboxError):
    """No usable ``dnmopd-sandbox`` executable."""


def sandbox_executable() -> Path:
    """The executable to run; a clear error if it is missing or not executable."""
    override = os.environ.get(ENV_VARIABLE)
    path = Path(override) if override else INSTALLED
    if not path.is_file() or not os.access(path, os.X_OK):
        where = f"${ENV_VARIABLE}={override}" if override else str(path)
        raise SandboxNotInstalledError(
            f"the code sandbox executable is missing or not executable: {where}. It is built from native/ by "
            f"`pip install .` (scikit-build-core runs CMake; a C compiler and Linux are needed); for a "
            f"development build run `cmake -S . -B build && cmake --build build` and set "
            f"{ENV_VARIABLE}=build/native/dnmopd-sandbox")
    return path
