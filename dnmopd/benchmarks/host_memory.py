"""Peak resident memory of one step on the host (Linux), the CPU counterpart of ``max_memory_allocated``.

torch's CPU allocator takes memory from malloc, which keeps small freed blocks for reuse and returns large
ones only above its (adaptive) mmap threshold. ``track_freed_memory`` fixes that threshold at 64 KiB, so
every tensor of any size is mapped on allocation and unmapped on free: the resident set then follows the
live tensors. ``peak_during(step)`` resets the kernel's high-water mark (``/proc/self/clear_refs``), runs
the step and returns the growth of the high-water mark over the resident set before it, in bytes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_BYTES = 64 * 2**10
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def track_freed_memory() -> str | None:
    """Make freed tensors leave the resident set at once; returns why that is impossible here, or None."""
    if not (_STATUS.is_file() and _CLEAR_REFS.exists()):
        return "no /proc/self/status or clear_refs (not Linux)"
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) and libc.mallopt(M_TRIM_THRESHOLD, 0)
    except (OSError, AttributeError):
        return f"no mallopt in {name} (not glibc)"
    return None if ok else "mallopt refused the mmap threshold"


def _status_bytes(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024  # "VmHWM:   123456 kB"
    raise RuntimeError(f"{_STATUS}: no {field} line")


def peak_during(step) -> int:
    """Bytes by which the resident set peaked above its level before ``step()``."""
    _CLEAR_REFS.write_text("5")  # reset VmHWM to the current VmRSS
    base = _status_bytes("VmRSS")
    step()
    return _status_bytes("VmHWM") - base
