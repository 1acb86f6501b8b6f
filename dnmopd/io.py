"""File helpers shared by the package: atomic writes of files and folders, JSONL, hashing, byte sizes, and
write errors that name a full or read-only disk."""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

_HASH_CHUNK = 4 << 20


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Write to a temporary file next to ``path`` and rename it into place only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, _new_file_mode(path))
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": "\n"})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Build a folder under a temporary name next to ``path`` (the yielded path) and move it into place only on
    success, replacing a folder already there; on any error the temporary folder is removed and ``path`` is
    untouched. The folder gets the modes of new files and folders under the umask (``apply_default_modes``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        apply_default_modes(tmp)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _new_file_mode(path: Path) -> int:
    """The mode an ordinary ``open(path, "w")`` would give (mkstemp creates files 0600)."""
    if path.exists():
        return path.stat().st_mode & 0o777
    return 0o666 & ~_umask()


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def apply_default_modes(root: str | os.PathLike) -> None:
    """Give ``root`` and everything under it the modes of new files and folders under the umask (0666 and 0777
    minus the umask): safetensors writes 0600 and ``mkdtemp`` makes 0700, which another user cannot read."""
    umask = _umask()
    root = Path(root)
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)


def open_regular_file(path: str | os.PathLike) -> IO[bytes]:
    """``path`` opened for reading in binary mode; an OSError when it is not a regular file (a FIFO would block
    the reader, a device such as ``/dev/zero`` never ends). Opening does not block, so the check comes first."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file (a FIFO, device or directory)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def dump_row(row: dict) -> str:
    """One JSONL line, keys in the row's own order, non-ASCII kept as is."""
    return json.dumps(row, ensure_ascii=False)


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> int:
    """Atomically write rows as JSON lines; returns the number of rows."""
    count = 0
    with atomic_write(path) as handle:
        for row in rows:
            handle.write(dump_row(row) + "\n")
            count += 1
    return count


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


_BYTE_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_byte_size(text: str) -> int:
    """Bytes of a size such as ``5GB``, ``500MB`` or ``64KiB`` (an ``argparse`` type: a bad size is a usage error)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMG]?i?B)?", text.strip(), flags=re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"cannot parse size {text!r} (examples: 5GB, 500MB, 64KiB)")
    return int(float(match.group(1)) * _BYTE_UNITS[(match.group(2) or "").lower()])


def format_bytes(count: float) -> str:
    """``1.5 GiB``, ``512 KiB``, ``0 B``: a byte count for messages."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    power = 0
    while abs(count) >= 1024 and power < len(units) - 1:
        count, power = count / 1024, power + 1
    return f"{count:.0f} B" if power == 0 else f"{count:.1f} {units[power]}"


DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
FULL_BELOW_BYTES = 1 << 20
"""A file system with less free space than this counts as full when a write under it fails without an errno
(torch's and safetensors' writers report a short write, not ENOSPC)."""


class DiskError(OSError):
    """A write failed because its file system is full, over quota or read-only."""


@contextlib.contextmanager
def disk_errors(path: str | os.PathLike, what: str) -> Iterator[None]:
    """Give a write under ``path`` that fails because of its file system one clear error (`DiskError`) naming
    ``what`` and ``path``, the file system (mount point, device) and its free space; other errors pass unchanged.
    The cause is an ENOSPC/EDQUOT/EROFS anywhere in the error's chain or, for writers that lose the errno, a file
    system found read-only or with less than `FULL_BELOW_BYTES` free after the failure."""
    try:
        yield
    except BaseException as error:  # torch's CheckpointException is a BaseException
        passing = isinstance(error, DiskError | KeyboardInterrupt | SystemExit)
        cause = None if passing else _disk_cause(error, Path(path))
        if cause is None:
            raise
        raise DiskError(cause, f"writing {what} {path} failed: {os.strerror(cause)}: "
                               f"{_file_system(Path(path))}") from error


def _disk_cause(error: BaseException, path: Path) -> int | None:
    seen, pending = set(), [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in DISK_ERRNOS:
            return current.errno
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
    usage = os.statvfs(_existing(path))
    if usage.f_flag & os.ST_RDONLY:
        return errno.EROFS
    return errno.ENOSPC if usage.f_bavail * usage.f_frsize < FULL_BELOW_BYTES else None


def _existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _file_system(path: Path) -> str:
    """``the file system of /mnt/x (tmpfs, tmpfs) has 0 B free of 6.0 MiB``."""
    import psutil

    where = os.path.realpath(_existing(path))
    mounts = [p for p in psutil.disk_partitions(all=True)
              if where == p.mountpoint or where.startswith(p.mountpoint.rstrip("/") + "/")]
    mount = max(mounts, key=lambda p: len(p.mountpoint), default=None)
    usage = os.statvfs(where)
    free, total = usage.f_bavail * usage.f_frsize, usage.f_blocks * usage.f_frsize
    name = f"{mount.mountpoint} ({mount.device}, {mount.fstype})" if mount else where
    read_only = ", read-only" if usage.f_flag & os.ST_RDONLY else ""
    return f"the file system of {name}{read_only} has {format_bytes(free)} free of {format_bytes(total)}"
