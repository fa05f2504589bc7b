"""Hand the allocator's free memory back to the OS between the phases of a big load, and keep big loads off huge pages.

glibc keeps freed heap memory (and each thread's arena) resident; after the parse
threads are done and again after the columns are joined, that is tens of MB the
sort would otherwise add to. ``malloc_trim`` releases it; on other C libraries this
is a no-op.

numpy asks the kernel for transparent huge pages on every array of 4 MB or more. A
load allocates and frees GBs of short-lived columns; where free memory is fragmented
(a VM whose balloon hands freed pages back to the host) each 2 MB fault waits for the
kernel to compact memory: measured 13 s per GB touched, against 0.8 s with 4 KB pages,
which made a 10M-row nsys load three times slower than a 500k-row one per row.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import threading
from collections.abc import Iterator

import numpy as np


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


def _hugepage_switch():
    """numpy's switch for huge-page advice (private, stable since numpy 1.20), or None."""
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    return getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)


_lock = threading.Lock()
_holders = 0  # loads inside small_pages() now (the TUI may load on several threads)
_before = True  # numpy's setting when the first of them entered


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """Arrays allocated inside use 4 KB pages; numpy's setting is restored when the last holder leaves."""
    global _holders, _before
    switch = _hugepage_switch()
    if switch is None:
        yield
        return
    with _lock:
        if _holders == 0:
            _before = bool(switch(False))
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                switch(_before)
