"""The allocator's side of a big load: free memory handed back between phases, reused within a load, no huge pages.

glibc keeps freed heap memory (and each thread's arena) resident; after the parse
threads are done and again after the columns are joined, that is tens of MB the
sort would otherwise add to. ``malloc_trim`` releases it; on other C libraries this
is a no-op.

A load allocates and frees GBs of short-lived columns, and what the kernel charges is
the first touch of each page. numpy asks for transparent huge pages on every array of
4 MB or more; where free memory is fragmented (a VM whose balloon hands freed pages
back to the host) each 2 MB fault waits for the kernel to compact memory: measured
13 s per GB touched, against 0.8 s with 4 KB pages, which made a 10M-row nsys load
three times slower than a 500k-row one per row. And glibc returns every block over
32 MB to the OS when it is freed, so the next column of the same size faults all its
pages in again (each reading thread's arena likewise, batch after batch): 8.6 GB of
faults for a 10M-row nsys load that peaked at 2.3 GB. ``big_load()`` turns all of that
off while it lasts; it is process-wide, so it is restored when the last load leaves.
``many_threads()`` bounds what each parse thread's arena keeps during a Kineto load on
many cores.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import threading
from collections.abc import Iterator

import numpy as np

# mallopt parameters and glibc's defaults for them (malloc.h; arenas: 8 per core on 64-bit).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -3, -4, -8
_DEFAULT_TRIM_THRESHOLD, _DEFAULT_MMAP_MAX = 128 * 1024, 65536
# Where glibc's own adjustment takes its thresholds in a big load (malloc.c: DEFAULT_MMAP_THRESHOLD_MAX,
# and twice that for trimming); many_threads() puts them there when it is done.
_DYNAMIC_MMAP_THRESHOLD, _DYNAMIC_TRIM_THRESHOLD = 32 << 20, 64 << 20


@functools.lru_cache(maxsize=1)
def _libc():
    """glibc's malloc_trim and mallopt, or None on other C libraries."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim, opt = libc.malloc_trim, libc.mallopt
        trim.argtypes, opt.argtypes = [ctypes.c_size_t], [ctypes.c_int, ctypes.c_int]
        return trim, opt
    except (OSError, AttributeError):
        return None


def trim() -> None:
    """Release free heap memory to the OS, where the C library can."""
    fns = _libc()
    if fns is not None:
        fns[0](0)


def _hugepage_switch():
    """numpy's switch for huge-page advice (private, stable since numpy 1.20), or None."""
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    return getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)


_lock = threading.Lock()
_holders = 0  # loads inside big_load() now (the TUI may load on several threads)
_thread_holders = 0  # loads inside many_threads() now
_before = True  # numpy's huge-page setting when the first of them entered


@contextlib.contextmanager
def big_load() -> Iterator[None]:
    """Inside: 4 KB pages for new arrays, and freed memory kept in the heap for the next one.

    On the way out of the last holder, numpy's setting and glibc's defaults come back
    and the free memory is returned to the OS.
    """
    global _holders, _before
    switch, fns = _hugepage_switch(), _libc()
    with _lock:
        if _holders == 0:
            if switch is not None:
                _before = bool(switch(False))
            if fns is not None:
                fns[1](_M_MMAP_MAX, 0)  # big blocks from the heap, not from mmap (freed at once)
                fns[1](_M_TRIM_THRESHOLD, 1 << 30)  # and the heap keeps what is freed
                fns[1](_M_ARENA_MAX, 1)  # new (reading) threads too, not arenas of their own
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                if switch is not None:
                    switch(_before)
                if fns is not None:
                    fns[1](_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
                    fns[1](_M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)
                    fns[1](_M_ARENA_MAX, 8 * (os.cpu_count() or 1))
                    fns[0](0)


@contextlib.contextmanager
def many_threads(mmap_threshold: int) -> Iterator[None]:
    """Inside: glibc's mmap threshold fixed at ``mmap_threshold``, while many parse threads run.

    glibc raises its mmap threshold each time a mapped block is freed (up to 32 MB) and its
    trim threshold to twice that, so, a few blocks into a load, every parse thread's arena
    keeps up to 64 MB of freed memory resident, and the peak grows with the thread count. A
    fixed threshold (twice a block: blocks stay in the arenas) stops that adjustment and the
    arenas are trimmed as blocks are freed: on the 16-core H200 host a 1.26M-event load on
    eight threads peaked at 191 B/event instead of 210, and ran 10-20% faster than on four.
    Not on a few cores: on the 2-core VM the trimmed pages cost ~10% to fault in again. On
    the way out of the last holder the thresholds go where glibc's own adjustment would have
    taken them.
    """
    global _thread_holders
    fns = _libc()
    with _lock:
        if _thread_holders == 0 and fns is not None:
            fns[1](_M_MMAP_THRESHOLD, mmap_threshold)
        _thread_holders += 1
    try:
        yield
    finally:
        with _lock:
            _thread_holders -= 1
            if _thread_holders == 0 and fns is not None:
                fns[1](_M_MMAP_THRESHOLD, _DYNAMIC_MMAP_THRESHOLD)
                if _holders == 0:  # else big_load() holds the trim threshold, and puts it back
                    fns[1](_M_TRIM_THRESHOLD, _DYNAMIC_TRIM_THRESHOLD)
                fns[0](0)
