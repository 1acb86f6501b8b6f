"""Run one command in the native sandbox and read its JSON report into a :class:`SandboxResult`."""

from __future__ import annotations

import base64
import binascii
import functools
import json
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from dnmopd.sandbox.executable import SandboxError, sandbox_executable

ISOLATION_LEVELS = ("namespaces", "landlock", "seccomp")
"""Strongest first. ``namespaces``: user, pid, mount, net, ipc, uts and cgroup namespaces with a private,
read-only root (only the paths of the run's view, hidden directories empty, a private /proc, a size-limited
tmpfs /tmp), plus rlimits and a seccomp filter. ``landlock``: no namespaces; Landlock lets the program read
only the view's paths (names inside hidden directories can be listed, nothing in them read) and write only
its temporary directory (whose size is sampled), and (kernel >= 6.12) not signal outside processes; plus
rlimits and seccomp. ``seccomp``: rlimits and seccomp only; no path is confined or hidden; a root caller's
program runs as a private uid, an unprivileged caller's program runs as the caller and can read what the
caller can."""

_SETUP_GRACE_S = 45.0  # the executable's own setup timeout (30 s) plus margin


def isolation_rank(level: str) -> int:
    """0 for the strongest level; a ValueError names the known levels."""
    if level not in ISOLATION_LEVELS:
        raise ValueError(f"unknown isolation level {level!r}; known: {', '.join(ISOLATION_LEVELS)}")
    return ISOLATION_LEVELS.index(level)


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """Resource limits of one run (each enforced by the native sandbox)."""

    cpu_time_s: float = 10.0
    """CPU seconds per process (RLIMIT_CPU, rounded up to whole seconds): SIGXCPU, limit ``cpu``."""
    wall_time_s: float = 10.0
    """Wall-clock seconds for the whole run; then every process is killed, limit ``wall``."""
    memory_bytes: int = 1 << 30
    """Address space of each process (RLIMIT_AS: allocations fail, Python raises MemoryError), and resident
    memory of all processes together (sampled every 20 ms or so: the run is killed, limit ``memory``)."""
    processes: int = 16
    """Processes and threads at once (RLIMIT_NPROC in a private user namespace): fork fails with EAGAIN."""
    file_size_bytes: int = 16 << 20
    """Largest file the program may write (RLIMIT_FSIZE): SIGXFSZ, limit ``file_size``."""
    open_files: int = 64
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    output_bytes: int = 1 << 20
    """Bytes of stdout and of stderr kept; more output ends the run, limit ``output``."""
    tmp_bytes: int = 64 << 20
    """Size of the private temporary directory, which holds at most one file or directory per 4 KiB of it.
    Namespaces level: a tmpfs of that size (writes fail with ENOSPC). Other levels: its files, and the files
    the program holds open after deleting them, are sampled like the memory: limit ``disk``."""

    def __post_init__(self):
        for name in ("cpu_time_s", "wall_time_s"):
            value = getattr(self, name)
            if not 0 < value <= 86400:
                raise ValueError(f"Limits.{name} must be in (0, 86400] seconds, got {value!r}")
        for name, low in (("memory_bytes", 1 << 20), ("processes", 1), ("file_size_bytes", 0),
                          ("open_files", 4), ("output_bytes", 1), ("tmp_bytes", 1 << 16)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < low:
                raise ValueError(f"Limits.{name} must be an integer >= {low}, got {value!r}")

    def arguments(self) -> list[str]:
        return [f"--cpu-time={self.cpu_time_s}", f"--wall-time={self.wall_time_s}",
                f"--memory={self.memory_bytes}", f"--processes={self.processes}",
                f"--file-size={self.file_size_bytes}", f"--open-files={self.open_files}",
                f"--output={self.output_bytes}", f"--tmp-size={self.tmp_bytes}"]


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """What happened to the program (the executable's JSON report, typed)."""

    isolation: str
    """The level the run actually had (see ``ISOLATION_LEVELS``)."""
    fallback_reason: str | None
    """Why ``auto`` did not get namespaces, when it did not."""
    proc_mounted: bool
    exit_code: int | None
    """None when the program's first process was killed by a signal."""
    signal: int | None
    signal_name: str | None
    limit: str | None
    """The limit that fired: ``wall``, ``cpu``, ``memory`` (all processes together), ``output``,
    ``file_size``, ``disk`` (the temporary directory, levels without namespaces), or None. The per-process
    memory, process and open-file limits make the program's own calls fail instead (MemoryError, EAGAIN,
    EMFILE). ``cpu`` and ``file_size`` are seen on processes the sandbox reaps (the first one and orphans);
    a child the program waits for itself reports through the program's own exit status."""
    cpu_time_s: float
    """User + system time of every process of the run."""
    wall_time_s: float
    peak_memory_bytes: int
    """Largest resident set of any single process of the run."""
    stdout_data: bytes
    """The bytes the program wrote to stdout, exactly (cut at the output limit)."""
    stdout_bytes: int
    """How many it wrote in all."""
    stdout_truncated: bool
    stderr_data: bytes
    stderr_bytes: int
    stderr_truncated: bool

    @property
    def stdout(self) -> str:
        """stdout as text (invalid UTF-8 becomes U+FFFD)."""
        return self.stdout_data.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.stderr_data.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        """Exited with status 0 and no limit fired."""
        return self.exit_code == 0 and self.limit is None

    @classmethod
    def from_report(cls, report: Mapping) -> SandboxResult:
        values = dict(report)
        try:
            for stream in ("stdout", "stderr"):
                values[f"{stream}_data"] = base64.b64decode(values.pop(f"{stream}_base64"), validate=True)
        except (KeyError, TypeError, binascii.Error) as error:
            raise SandboxError(f"the sandbox report has no readable {stream}_base64: {error}") from error
        names = [f.name for f in fields(cls)]
        missing = [name for name in names if name not in values]
        if missing:
            raise SandboxError(f"the sandbox report lacks {', '.join(missing)}: {report}")
        return cls(**{name: values[name] for name in names})


@dataclass(frozen=True, slots=True)
class Probe:
    """Which isolation this machine offers (``dnmopd-sandbox --probe``)."""

    best: str
    """The strongest available level, or ``none`` (then nothing can run)."""
    namespaces: bool
    namespaces_error: str | None
    landlock_abi: int
    seccomp: bool
    privileged: bool
    proc_mounted: bool


def _execute(arguments: list[str], stdin: bytes, timeout_s: float) -> dict:
    command = [str(sandbox_executable()), *arguments]
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as error:
        raise SandboxError(f"the sandbox did not finish within {timeout_s:.0f} s") from error
    if done.returncode == 2:
        raise SandboxError(f"the sandbox refused its arguments: {done.stderr.decode(errors='replace').strip()}")
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError as error:
        raise SandboxError(f"the sandbox exited {done.returncode} without a readable report: "
                           f"{done.stdout[:500]!r} {done.stderr[:500]!r}") from error
    if done.returncode != 0 or "error" in report:
        raise SandboxError(f"the sandbox could not run the program: {report.get('error', report)}")
    return report


DEFAULT_LIMITS = Limits()


def run(command: Sequence[str], *, limits: Limits = DEFAULT_LIMITS, stdin: bytes | str = b"",
        files: Mapping[str, bytes | str] | None = None, read_only: Sequence[str | Path] = (),
        hidden: Sequence[str | Path] = (), system_paths: bool = True, env: Mapping[str, str] | None = None,
        isolation: str = "auto") -> SandboxResult:
    """Run ``command`` isolated and limited; return what happened.

    ``files`` are written into the program's private temporary directory (its working directory and
    ``$HOME``/``$TMPDIR``) under the given names. The view: ``read_only`` host paths are visible read-only
    at the same place (symbolic links on the way are kept as links), and so are the system's library and
    binary directories unless ``system_paths`` is False; ``hidden`` directories inside those are masked (see
    ``ISOLATION_LEVELS``), though ``read_only`` paths beneath them stay visible. ``env`` is added to a
    minimal environment (``PATH``, ``HOME``, ``TMPDIR``, ``LANG``). ``isolation`` is ``auto`` (the strongest
    the machine allows) or one of ``ISOLATION_LEVELS`` (an error where unavailable). Raises
    :class:`SandboxError` when the program could not be run at all.
    """
    if isolation != "auto":
        isolation_rank(isolation)
    if not command:
        raise ValueError("run: the command is empty")
    arguments = [f"--isolation={isolation}", *limits.arguments()]
    arguments += [] if system_paths else ["--no-default-paths"]
    arguments += [f"--ro={Path(path).absolute()}" for path in read_only]
    arguments += [f"--hide={Path(path).absolute()}" for path in hidden]
    arguments += [f"--env={key}={value}" for key, value in (env or {}).items()]
    with tempfile.TemporaryDirectory(prefix="dnmopd-files-") as staging:
        for name, content in (files or {}).items():
            if not name or "/" in name or name in (".", ".."):
                raise ValueError(f"run: file name {name!r} must be a plain file name")
            (Path(staging) / name).write_bytes(content.encode() if isinstance(content, str) else content)
            arguments.append(f"--file={name}={Path(staging) / name}")
        data = stdin.encode() if isinstance(stdin, str) else stdin
        report = _execute([*arguments, "--", *command], data, limits.wall_time_s + _SETUP_GRACE_S)
    return SandboxResult.from_report(report)


@functools.cache
def probe() -> Probe:
    """What this machine offers (cached for the process)."""
    executable = sandbox_executable()
    try:
        done = subprocess.run([str(executable), "--probe"], capture_output=True, check=True, timeout=60)
        report = json.loads(done.stdout)
        return Probe(**{f.name: report[f.name] for f in fields(Probe)})
    except (subprocess.SubprocessError, ValueError, KeyError, TypeError) as error:
        stderr = (getattr(error, "stderr", None) or b"").decode(errors="replace").strip()
        raise SandboxError(f"`{executable} --probe` gave no usable report: {error}"
                           + (f"; stderr: {stderr[-500:]}" if stderr else "")) from error


def isolation_level() -> str:
    """The isolation level runs get here with ``isolation="auto"`` (``none`` if nothing works)."""
    return probe().best
