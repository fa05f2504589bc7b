"""Hand the allocator's free memory back to the OS between the phases of a big load.

glibc keeps freed heap memory (and each thread's arena) resident; after the parse
threads are done and again after the columns are joined, that is tens of MB the
sort would otherwise add to. ``malloc_trim`` releases it; on other C libraries this
is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


def trim() -> None:
    """Release free heap memory to the OS, where the C library can."""
    fn = _malloc_trim()
    if fn is not None:
        fn(0)
