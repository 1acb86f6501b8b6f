"""File helpers shared by the package: atomic writes of files and folders, JSONL, hashing."""

from __future__ import annotations

import argparse
import contextlib
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
