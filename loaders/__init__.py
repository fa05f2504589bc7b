"""load(path) -> Trace: sniff the format by content, decompress, and dispatch to a reader."""

from __future__ import annotations

import os
import zlib
from typing import TYPE_CHECKING

from gaplens.loaders.files import GZIP_MAGIC, SQLITE_MAGIC, Progress, read_head
from gaplens.loaders.model import Trace, TraceError

if TYPE_CHECKING:
    from gaplens.loaders.kineto import LoadStats

__all__ = ["Progress", "Trace", "TraceError", "load"]


def load(
    path: str | os.PathLike,
    progress: Progress | None = None,
    use_cache: bool = True,
    stats: LoadStats | None = None,
) -> Trace:
    """Open any supported trace: Kineto JSON(.gz), nsys SQLite(.gz) or .nsys-rep.

    A trace built before (same absolute path, size and mtime) comes from the cache.
    ``stats`` (Kineto) is filled with how the events were read.
    """
    path = os.fspath(path)
    head = _head(path)
    damaged = ""
    if use_cache:
        from gaplens.loaders import cache

        hit, damaged = cache.lookup_checked(path)
        if hit is not None:
            hit.meta.path = path  # as the caller spelled it, like a fresh load
            return hit
    trace = _load(path, head, progress, stats)
    if use_cache:
        if progress is not None:
            progress("caching", 1.0)
        cache.store(path, trace)
        if damaged:  # said once, after the store: the rebuilt entry does not repeat it
            trace.meta.warnings.append(damaged)
    return trace


def _load(path: str, head: bytes, progress: Progress | None, stats: LoadStats | None = None) -> Trace:
    if head.startswith(SQLITE_MAGIC) or path.endswith(".nsys-rep") or _gunzipped_head(head).startswith(SQLITE_MAGIC):
        from gaplens.loaders.nsys import load_nsys

        return _require_events(path, load_nsys(path, progress))
    if not head:
        raise TraceError(f"{path}: the file is empty")
    from gaplens.loaders.kineto import load_kineto

    return _require_events(path, load_kineto(path, progress, stats))


def _require_events(path: str, trace: Trace) -> Trace:
    """A trace with no duration event left is unusable; say what the loader dropped on the way."""
    if len(trace):
        return trace
    why = "; ".join(trace.meta.warnings) or "empty traceEvents"
    raise TraceError(f"{path}: the trace holds no duration events ({why})")


def _gunzipped_head(head: bytes) -> bytes:
    """The first decompressed bytes of a gzip file (b"" when not gzip or unreadable)."""
    if not head.startswith(GZIP_MAGIC):
        return b""
    try:
        return zlib.decompressobj(wbits=47).decompress(head, 16)
    except zlib.error:
        return b""


def _head(path: str) -> bytes:
    """First bytes of a file, to sniff the format before reading it all."""
    return read_head(path, 4096)
