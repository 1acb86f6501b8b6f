"""Running untrusted programs in the native sandbox (``native/sandbox``, installed as
``dnmopd/_bin/dnmopd-sandbox``).

- :func:`run` runs one command under :class:`Limits` and returns a :class:`SandboxResult` (exit status,
  signal, which limit fired, CPU and wall time, peak memory, stdout/stderr cut at the output limit).
- :func:`run_python` runs a Python program (in the minimal view of :class:`PythonRuntime`) as a script, by calling
  one of its functions, as the paper's judge did, or as LiveCodeBench's official runner does; :func:`records` reads
  the per-test results.
- :func:`isolation_level` / :func:`probe` tell which isolation this machine gives (``ISOLATION_LEVELS``).

:class:`SandboxError` means the program could not be run at all; :class:`SandboxNotInstalledError` that
the executable is missing.
"""

from dnmopd.sandbox.executable import SandboxError, SandboxNotInstalledError, sandbox_executable
from dnmopd.sandbox.python import COMPILE_ERROR_EXIT, PRELUDE, Opaque, PythonRuntime, Record, records, run_python
from dnmopd.sandbox.runner import (
    ISOLATION_LEVELS,
    Limits,
    Probe,
    SandboxResult,
    isolation_level,
    isolation_rank,
    probe,
    run,
)

__all__ = [
    "COMPILE_ERROR_EXIT", "ISOLATION_LEVELS", "PRELUDE", "Limits", "Opaque", "Probe", "PythonRuntime", "Record",
    "SandboxError", "SandboxNotInstalledError", "SandboxResult", "isolation_level", "isolation_rank", "probe",
    "records", "run", "run_python", "sandbox_executable",
]
