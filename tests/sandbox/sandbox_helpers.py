"""Shared by the sandbox tests: which levels run here, an interpreter each level can use, host checks."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from dnmopd.sandbox import ISOLATION_LEVELS, PythonRuntime, probe


def available(level: str) -> bool:
    p = probe()
    return p.seccomp and {"namespaces": p.namespaces, "landlock": p.landlock_abi > 0, "seccomp": True}[level]


def levels_here() -> list:
    """Every level as a parameter; those this machine lacks are skipped with the reason."""
    return [pytest.param(level, marks=pytest.mark.skipif(not available(level), reason=f"no {level} here"))
            for level in ISOLATION_LEVELS]


def runtime_for(level: str) -> PythonRuntime:
    """The namespaced level mounts this interpreter's prefixes; the others run the program in place, where a
    root caller's program has a private uid and needs an interpreter that any user may execute."""
    if level == "namespaces" or not probe().privileged:
        return PythonRuntime.of()
    for candidate in (os.path.realpath(PythonRuntime.of().executable), "/usr/bin/python3", "/usr/local/bin/python3"):
        if candidate and _world_executable(candidate):
            return PythonRuntime.of(candidate)
    pytest.skip(f"no interpreter executable by other users for the {level} level")


def _world_executable(path: str) -> bool:
    p = Path(path)
    if not p.is_file():
        return False
    return all(q.stat().st_mode & 0o001 for q in [p, *p.parents])


def confines_files(level: str) -> bool:
    """At the seccomp level only a private uid (root callers) keeps the program from the caller's files."""
    return level != "seccomp" or probe().privileged


def token() -> str:
    return "dnmopd" + secrets.token_hex(12)


def processes_with(marker: str | bytes) -> list[int]:
    """Host processes whose command line contains marker."""
    needle = marker.encode() if isinstance(marker, str) else marker
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


HARNESS_COMMAND = b"harness.pyc\0request.json"  # in the command line of every process of a run_python run


def sysv_key(marker: str) -> int:
    """The SysV IPC key a hostile program derives from the marker (so the host can be searched for it)."""
    return 0x5B000000 | int(marker[-6:], 16)


def host_traces(marker: str) -> list[str]:
    """What a run left on the host: files named after the marker in the shared temporary directories, SysV
    IPC objects under its key, processes that carry it or the harness's command line."""
    shared = ("/tmp", "/var/tmp", "/dev/shm")
    traces = [str(path) for directory in shared for path in Path(directory).glob(f"*{marker}*")]
    for kind in ("shm", "sem", "msg"):
        table = Path(f"/proc/sysvipc/{kind}")
        lines = table.read_text().splitlines()[1:] if table.exists() else []
        traces += [f"SysV {kind} {line.split()[0]}" for line in lines if int(line.split()[0]) == sysv_key(marker)]
    traces += [f"process {pid}" for pid in processes_with(marker) + processes_with(HARNESS_COMMAND)]
    return traces


def remove_traces(marker: str) -> None:
    """Removes files the seccomp level lets a program leave (it confines no path; documented)."""
    for directory in ("/tmp", "/var/tmp", "/dev/shm"):
        for path in Path(directory).glob(f"*{marker}*"):
            path.unlink()

