"""glibc's malloc, tuned for a broker that receives bodies of megabytes one after another.

By default glibc maps each block over a threshold (128 KiB, raised up to 32 MiB as such
blocks are freed) on its own, and trims the top of its heap once twice that is free: one
large body after another then lands in fresh pages, which the kernel faults in and zeroes
one by one (a sixth of the CPU time of 1 MiB messages). `tune_allocator` fixes the
threshold at 32 MiB and lets up to 64 MiB of free heap stay, so that the next body reuses
the last one's memory; the alarms' check gives what stays free back every second
(`release_free_memory`, right before it samples the resident memory), so that memory freed
in a burst (bodies gathered frame by frame, a backlog drained) is not held for long.
Larger blocks are still mapped and unmapped on their own. Other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import logging
import platform
from typing import Final

log = logging.getLogger(__name__)

# mallopt(3) parameters, from glibc's malloc.h.
M_TRIM_THRESHOLD: Final = -1
M_MMAP_THRESHOLD: Final = -3
MMAP_THRESHOLD: Final = 32 << 20
TRIM_THRESHOLD: Final = 64 << 20

_GLIBC: Final = ctypes.CDLL(None) if platform.libc_ver()[0] == "glibc" else None
# CPython's constructor leaves a new bytearray's bytes as malloc gave them; `bytearray(n)` zeroes them.
_NEW_BYTEARRAY: Final = ctypes.pythonapi.PyByteArray_FromStringAndSize
_NEW_BYTEARRAY.restype = ctypes.py_object
_NEW_BYTEARRAY.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)


def tune_allocator() -> None:
    """Set the thresholds above; once, at start-up."""
    if _GLIBC is None:
        return
    if not (_GLIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and _GLIBC.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        log.warning("could not tune the memory allocator (mallopt refused)")


def release_free_memory() -> None:
    """Hand the pages the allocator keeps free back to the kernel (malloc_trim)."""
    if _GLIBC is not None:
        _GLIBC.malloc_trim(0)


def unfilled_bytearray(size: int) -> bytearray:
    """`size` bytes that are not zeroed first, for a buffer its owner fills whole before anything
    reads it (a body received frame by frame): zeroing megabytes just before they are
    overwritten was a tenth of the CPU time of 1 MiB messages."""
    buffer: bytearray = _NEW_BYTEARRAY(None, size)
    return buffer
