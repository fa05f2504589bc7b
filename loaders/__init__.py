"""load(path) -> Trace: sniff the format by content, decompress, and dispatch to a reader."""

from __future__ import annotations

import os
import zlib
from typing import TYPE_CHECKING, Protocol

from gaplens.loaders.files import GZIP_MAGIC, SQLITE_MAGIC, Progress, read_head
from gaplens.loaders.model import Trace, TraceError

if TYPE_CHECKING:
    from gaplens.loaders.kineto.reader import LoadStats

__all__ = ["Progress", "Trace", "TraceCache", "TraceError", "load", "use_cache"]


class TraceCache(Protocol):
    """Where built Traces are kept between runs: ``gaplens.store.cache`` is the one the app and CLI install."""

    def lookup_checked(self, path: str) -> tuple[Trace | None, str]: ...

    def store(self, path: str, trace: Trace) -> object: ...


#: The cache ``load`` consults; None until the app, the CLI or the API installs one (``gaplens.store.install``):
#: the loaders read files and build Traces, and never decide where anything is written.
_CACHE: TraceCache | None = None


def use_cache(cache: TraceCache | None) -> None:
    """Install (or, with None, remove) the trace cache ``load`` consults."""
    global _CACHE
    _CACHE = cache


def load(
    path: str | os.PathLike,
    progress: Progress | None = None,
    use_cache: bool = True,
    stats: LoadStats | None = None,
) -> Trace:
    """Open any supported trace: Kineto JSON(.gz), nsys SQLite(.gz) or .nsys-rep.

    A trace built before (same absolute path, size and mtime) comes from the installed cache
    (``use_cache``). ``stats`` (Kineto) is filled with how the events were read.
    """
    path = os.fspath(path)
    head = _head(path)
    damaged = ""
    cache = _CACHE if use_cache else None
    if cache is not None:
        hit, damaged = cache.lookup_checked(path)
        if hit is not None:
            hit.meta.path = path  # as the caller spelled it, like a fresh load
            return hit
    trace = _load(path, head, progress, stats)
    if cache is not None:
        if progress is not None:
            progress("caching", 1.0)
        cache.store(path, trace)
        if damaged:  # said once, after the store: the rebuilt entry does not repeat it
            trace.meta.warnings.append(damaged)
    return trace


def _load(path: str, head: bytes, progress: Progress | None, stats: LoadStats | None = None) -> Trace:
    if head.startswith(SQLITE_MAGIC) or path.endswith(".nsys-rep") or _gunzipped_head(head).startswith(SQLITE_MAGIC):
        from gaplens.loaders.nsys.reader import load_nsys

        return _require_events(path, load_nsys(path, progress))
    if not head:
        raise TraceError(f"{path}: the file is empty")
    from gaplens.loaders.kineto.reader import load_kineto

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
