"""dnmopd.sandbox.run: the typed report, limits, files, environment, errors."""

from __future__ import annotations

import json
import random
import subprocess

import pytest
from sandbox_helpers import levels_here

from dnmopd.sandbox import (
    Limits,
    SandboxError,
    SandboxNotInstalledError,
    isolation_level,
    probe,
    run,
    sandbox_executable,
)


def test_the_executable_ships_inside_the_installed_package():
    import dnmopd

    path = sandbox_executable()
    assert path.parent.name == "_bin" and path.parent.parent == __import__("pathlib").Path(dnmopd.__file__).parent
    assert subprocess.run([str(path), "--help"], capture_output=True).returncode == 0


def test_probe_and_auto_runs_agree_on_the_level():
    level = isolation_level()
    assert level in ("namespaces", "landlock", "seccomp")
    assert run(["/bin/true"]).isolation == level
    report = probe()
    assert report.seccomp and (report.namespaces == (level == "namespaces"))


@pytest.mark.parametrize("level", levels_here())
def test_report_of_a_normal_run(level):
    r = run(["/bin/sh", "-c", 'read line; echo "got $line"; echo oops >&2; exit 3'], stdin="hello\n",
            isolation=level)
    assert (r.isolation, r.exit_code, r.signal, r.limit) == (level, 3, None, None)
    assert (r.stdout, r.stderr, r.stdout_bytes, r.stdout_truncated) == ("got hello\n", "oops\n", 10, False)
    assert r.wall_time_s < 5 and r.cpu_time_s >= 0 and r.peak_memory_bytes > 0 and not r.ok


@pytest.mark.parametrize("level", levels_here())
def test_files_environment_and_working_directory(level):
    r = run(["/bin/sh", "-c", 'cat given.txt; echo " $GREETING"; test "$PWD" = "$HOME" && echo home'],
            files={"given.txt": "from the caller"}, env={"GREETING": "hi"}, isolation=level)
    assert r.stdout == "from the caller hi\nhome\n", r


@pytest.mark.parametrize("level", levels_here())
def test_signal_and_limits_are_reported(level):
    r = run(["/bin/sh", "-c", "kill -SEGV $$"], isolation=level)
    assert (r.exit_code, r.signal, r.signal_name, r.limit) == (None, 11, "SIGSEGV", None)
    r = run(["/bin/sh", "-c", "yes flood"], limits=Limits(output_bytes=1000), isolation=level)
    assert (r.limit, r.stdout_truncated, len(r.stdout), r.signal_name) == ("output", True, 1000, "SIGKILL")
    assert r.stdout_bytes > 1000 and r.stdout.startswith("flood\n")
    r = run(["/bin/sh", "-c", "exec head -c 3000000 /dev/zero > big"], limits=Limits(file_size_bytes=1 << 20),
            isolation=level)
    assert (r.limit, r.signal_name) == ("file_size", "SIGXFSZ")


def test_undecodable_output_is_kept_exactly_and_replaced_in_the_text():
    r = run(["/bin/sh", "-c", r"printf 'a\377b\n'"])
    assert (r.stdout_data, r.stdout, r.stdout_bytes) == (b"a\xffb\n", "a\ufffdb\n", 4)


@pytest.mark.parametrize("level", levels_here())
def test_any_output_bytes_come_back_exactly(level):
    rng = random.Random(5)
    limits = Limits(output_bytes=1 << 16)
    for size in [0, 1, 2, 3, 2048, 65535, 1 << 16, (1 << 16) + 7, *[rng.randrange(1 << 17) for _ in range(6)]]:
        data = bytes(rng.randrange(0xF5, 0x100) if size == 2048 else rng.randrange(256) for _ in range(size))
        r = run(["/bin/cat", "data.bin"], files={"data.bin": data}, limits=limits, isolation=level)
        assert r.stdout_data == data[:1 << 16] and r.stdout_bytes >= min(size, 1 << 16), size
        assert r.stdout_truncated == (size > 1 << 16) and (r.limit == "output") == (size > 1 << 16), size


def test_limits_are_validated_with_the_field_name():
    with pytest.raises(ValueError, match="Limits.wall_time_s"):
        Limits(wall_time_s=0)
    with pytest.raises(ValueError, match="Limits.memory_bytes"):
        Limits(memory_bytes=1000)
    with pytest.raises(ValueError, match="plain file name"):
        run(["/bin/true"], files={"../escape": b""})
    with pytest.raises(ValueError, match="unknown isolation level"):
        run(["/bin/true"], isolation="chroot")


def test_setup_failures_raise_sandbox_error():
    with pytest.raises(SandboxError, match="exec /no/such/program"):
        run(["/no/such/program"])
    with pytest.raises(SandboxError, match="--ro /no/such/dir"):
        run(["/bin/true"], read_only=["/no/such/dir"])
    with pytest.raises(SandboxError, match="cannot be exposed"):
        run(["/bin/true"], read_only=["/"])


def test_missing_executable_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("DNMOPD_SANDBOX", str(tmp_path / "absent"))
    with pytest.raises(SandboxNotInstalledError, match="DNMOPD_SANDBOX=.*absent.*pip install"):
        run(["/bin/true"])


def test_command_line_usage_errors_exit_2_with_the_option_named():
    done = subprocess.run([str(sandbox_executable()), "--processes=0", "--", "/bin/true"], capture_output=True,
                          text=True)
    assert done.returncode == 2 and "--processes" in done.stderr
    done = subprocess.run([str(sandbox_executable()), "--probe"], capture_output=True, text=True)
    assert json.loads(done.stdout)["best"] == isolation_level()
