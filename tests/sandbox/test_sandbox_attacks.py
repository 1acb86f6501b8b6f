"""Hostile Python programs at every isolation level this machine offers: each is stopped by the specific
limit or error it must meet, and the host stays healthy (no surviving process, file, connection, SysV IPC
object or leak).

The same attacks, written in C, run at every level (and as an unprivileged user) in the ctest suite.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sandbox_helpers import confines_files, host_traces, levels_here, processes_with, runtime_for, sysv_key, token

from dnmopd.sandbox import Limits, run

pytestmark = pytest.mark.parametrize("level", levels_here())


ATTACK_LIMITS = Limits(wall_time_s=5, cpu_time_s=5)


def attack(level: str, source: str, marker: str, limits: Limits = ATTACK_LIMITS):
    """Runs ``python -c source marker`` (forks inherit the marker in their command line), then checks that
    no process of the run is left on the host."""
    runtime = runtime_for(level)
    result = run([runtime.executable, "-I", "-c", textwrap.dedent(source), marker], limits=limits,
                 read_only=runtime.read_only, isolation=level)
    assert result.isolation == level
    assert processes_with(marker) == [], "a process of the run survived it"
    return result


def needs_file_confinement(level):
    if not confines_files(level):
        pytest.skip("at the seccomp level an unprivileged caller's program runs as the caller (documented)")


def test_fork_bomb_stops_at_the_process_limit(level):
    marker = token()
    r = attack(level, """
        import os, time
        made = 0
        while True:
            try:
                pid = os.fork()
            except BlockingIOError as error:
                print("fork failed", error.errno, made, flush=True)
                break
            if pid == 0:
                made = 0
                continue
            made += 1
        time.sleep(60)
        """, marker, Limits(processes=8, wall_time_s=2, cpu_time_s=5))
    lines = r.stdout.splitlines()
    assert r.limit == "wall" and 1 < len(lines) <= 8, r
    assert all(line.startswith("fork failed 11 ") for line in lines), r.stdout  # EAGAIN


def test_memory_bomb_gets_memory_error(level):
    r = attack(level, """
        chunks = []
        while True:
            chunks.append(bytearray(32 << 20))
        """, token(), Limits(memory_bytes=256 << 20))
    assert r.exit_code == 1 and r.stderr.rstrip().endswith("MemoryError"), r
    assert r.peak_memory_bytes < 256 << 20 and r.limit is None


def test_memory_spread_over_processes_hits_the_total_limit(level):
    r = attack(level, """
        import os, time
        for _ in range(5):
            if os.fork() == 0:
                break
        hoard = [bytearray(32 << 20) for _ in range(5)]  # 160 MiB each, 960 MiB in all
        print("holding", flush=True)
        time.sleep(60)
        """, token(), Limits(memory_bytes=256 << 20, wall_time_s=30))
    assert (r.limit, r.signal_name) == ("memory", "SIGKILL") and r.wall_time_s < 20, r


def test_infinite_loop_hits_the_cpu_limit(level):
    r = attack(level, "while True: pass", token(), Limits(cpu_time_s=1, wall_time_s=20))
    assert (r.limit, r.signal_name, r.exit_code) == ("cpu", "SIGXCPU", None)
    assert 0.8 <= r.cpu_time_s < 3


def test_sleeping_past_the_wall_time_is_killed(level):
    r = attack(level, "import time; time.sleep(100)", token(), Limits(wall_time_s=1))
    assert (r.limit, r.signal_name) == ("wall", "SIGKILL")
    assert 1.0 <= r.wall_time_s < 3 and r.cpu_time_s < 1


def test_writing_outside_the_temporary_directory_fails(level, tmp_path):
    needs_file_confinement(level)
    victim = tmp_path / "keep.txt"
    victim.write_text("caller's data")
    marker = token()
    targets = [tmp_path / f"{marker}-new", Path(f"/tmp/{marker}-new"), Path(f"/dev/shm/{marker}-new")]
    r = attack(level, f"""
        import os
        for path in {[str(t) for t in targets]!r}:
            try:
                open(path, "w").write("x")
                print("wrote", path)
            except OSError as error:
                print("refused", type(error).__name__)
        for action in (lambda: os.remove({str(victim)!r}), lambda: open({str(victim)!r}, "w")):
            try:
                action()
                print("touched the caller's file")
            except OSError as error:
                print("refused", type(error).__name__)
        open("mine.txt", "w").write("allowed")  # the private temporary directory
        print("own file", open("mine.txt").read())
        """, marker)
    assert victim.read_text() == "caller's data"
    assert not targets[0].exists() and "touched" not in r.stdout and "own file allowed" in r.stdout, r
    for shared in targets[1:]:  # world-writable: only namespaces and Landlock keep the program out
        if level == "seccomp" and shared.exists():
            shared.unlink()
            continue
        assert not shared.exists(), f"{level}: the program created {shared} on the host"


def test_reading_a_secret_file_of_the_caller_fails(level, tmp_path):
    needs_file_confinement(level)
    secret = tmp_path / "secret.txt"
    marker = token()
    secret.write_text(marker + "-secret")
    secret.chmod(0o600)
    readable_source = Path(__file__)  # world-readable, but not a path the interpreter needs
    r = attack(level, f"""
        for path in ({str(secret)!r}, {str(readable_source)!r}):
            try:
                print("read", open(path).read()[:80])
            except OSError as error:
                print("refused", type(error).__name__)
        """, marker)
    assert f"{marker}-secret" not in r.stdout and r.stdout.startswith("refused"), r
    if level != "seccomp":  # the seccomp level does not hide world-readable files (documented)
        assert r.stdout.count("refused") == 2, r


def test_no_network_not_even_loopback(level):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    r = attack(level, f"""
        import socket
        for family, address in ((socket.AF_INET, ("127.0.0.1", {port})), (socket.AF_INET6, ("::1", {port}))):
            try:
                socket.create_connection(address, timeout=2)
                print("connected")
            except OSError as error:
                print("refused", type(error).__name__, error.errno)
        """, token())
    assert r.stdout.splitlines() == ["refused PermissionError 13"] * 2, r
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()


def test_output_flood_is_cut_at_the_output_limit(level):
    r = attack(level, "while True: print('x' * 999)", token(), Limits(output_bytes=64 << 10))
    assert (r.limit, r.stdout_truncated, len(r.stdout)) == ("output", True, 64 << 10)
    assert r.stdout_bytes > 64 << 10


def test_killing_the_parent_and_everyone_fails(level):
    sentinel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        r = attack(level, f"""
            import os
            for name, pid in (("parent", os.getppid()), ("everyone", -1), ("caller", {os.getpid()}),
                              ("sentinel", {sentinel.pid}), ("init", 1)):
                try:
                    os.kill(pid, 9)
                    print("sent", name)
                except OSError as error:
                    print("refused", name, type(error).__name__)
            print("survived")
            """, token())
        assert r.exit_code == 0 and r.stdout.endswith("survived\n"), r
        assert sentinel.poll() is None, "a process of the caller was killed"
    finally:
        sentinel.kill()
        sentinel.wait()


def test_a_daemon_does_not_outlive_the_run(level):
    r = attack(level, """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.close(1); os.close(2)
                time.sleep(60)
            os._exit(0)
        os.wait()
        print("daemonized")
        """, token(), Limits(wall_time_s=30))
    assert r.stdout == "daemonized\n" and r.exit_code == 0 and r.wall_time_s < 10  # attack() checked survival


def test_the_hosts_proc_shows_no_caller_secrets(level, monkeypatch):
    needs_file_confinement(level)
    secret = token()
    monkeypatch.setenv("DNMOPD_TEST_SECRET", secret)  # the caller's and the sandbox's environment
    r = attack(level, f"""
        import os
        visible = 0
        try:
            listed = os.listdir("/proc")
        except OSError as error:  # Landlock: /proc is not among the readable paths
            listed = []
            print("listing refused", type(error).__name__)
        for pid in ["1", "self", str(os.getppid()), "{os.getpid()}"] + listed:
            if not (pid.isdigit() or pid == "self"):
                continue
            visible += 1
            try:
                for entry in open(f"/proc/{{pid}}/environ", "rb").read().split(b"\\0"):
                    if entry.startswith(b"DNMOPD_TEST_SECRET="):
                        print("leaked", entry)
            except OSError:
                pass
        print("visible", visible)
        """, token())
    assert "leaked" not in r.stdout and secret not in r.stdout + r.stderr and r.exit_code == 0, r
    if level == "namespaces":  # a private /proc: the host's processes are not there at all
        assert int(r.stdout.split()[-1]) < 10, r


def test_no_unix_socket_sysv_ipc_or_memfd(level, tmp_path):
    marker = token()
    host_socket = tmp_path / "host.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(host_socket))
    listener.listen(1)
    listener.setblocking(False)
    tmp_path.chmod(0o755)
    host_socket.chmod(0o777)
    key = sysv_key(marker)
    r = attack(level, f"""
        import ctypes, os, socket
        def attempt(name, action):
            try:
                action()
                print(name, "allowed")
            except OSError as error:
                print(name, "refused", error.errno)
        attempt("unix", lambda: socket.socket(socket.AF_UNIX).connect({str(host_socket)!r}))
        attempt("memfd", lambda: os.memfd_create("hoard"))
        libc = ctypes.CDLL(None, use_errno=True)
        for call in ("shmget({key}, 1 << 20, 0o1666)", "semget({key}, 1, 0o1666)", "msgget({key}, 0o1666)",
                     "shmat(0, None, 0)"):
            result = eval("libc." + call, {{"libc": libc}})
            print(call.split("(")[0], result in (-1, ctypes.c_void_p(-1).value), ctypes.get_errno())
        a, b = socket.socketpair()
        a.sendall(b"pair")
        print("socketpair", b.recv(4).decode())
        """, marker)
    assert r.stdout.splitlines() == ["unix refused 13", "memfd refused 1", "shmget True 1", "semget True 1",
                                     "msgget True 1", "shmat True 1", "socketpair pair"], r
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()
    assert host_traces(marker) == []


def test_shared_memory_counts_toward_the_memory_limit(level):
    r = attack(level, """
        import mmap, os, time
        for _ in range(3):
            if os.fork() == 0:
                break
        shared = mmap.mmap(-1, 96 << 20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        for page in range(0, 96 << 20, 4096):
            shared[page] = 1
        time.sleep(60)
        """, token(), Limits(memory_bytes=256 << 20, wall_time_s=30))
    assert (r.limit, r.signal_name) == ("memory", "SIGKILL") and r.wall_time_s < 20, r


def test_the_temporary_directory_has_a_quota(level):
    r = attack(level, """
        import errno, time
        for n in range(64):
            try:
                with open(f"fill{n}", "wb") as f:
                    f.write(bytes(1 << 20))
            except OSError as error:
                print("refused", errno.errorcode[error.errno], "after", n)
                break
        else:
            time.sleep(60)
        """, token(), Limits(tmp_bytes=8 << 20, wall_time_s=30))
    if level == "namespaces":  # a tmpfs of that size
        assert r.exit_code == 0 and r.stdout.startswith("refused ENOSPC after "), r
        assert 4 <= int(r.stdout.split()[-1]) <= 8, r
    else:  # sampled: the run is killed
        assert (r.limit, r.signal_name) == ("disk", "SIGKILL"), r
