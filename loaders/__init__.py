"""load(path) -> Trace: sniff the format by content, decompress, and dispatch to a reader."""

from __future__ import annotations

import os
import zlib
from typing import TYPE_CHECKING

from gaplens.loaders.cache_hook import TraceCache, installed, use_cache
from gaplens.loaders.errors import TraceError
from gaplens.loaders.files import GZIP_MAGIC, SQLITE_MAGIC, Progress, read_head
from gaplens.loaders.rocprof import load_rocprof
from gaplens.loaders.trace import Trace
from gaplens.loaders.xplane import load_xplane
from gaplens.loaders.xplane.sniff import looks_like_xplane, runs
from gaplens.loaders.xplane.trace_json import is_jax_trace_json, load_jax_trace_json

if TYPE_CHECKING:
    from gaplens.loaders.kineto.reader import LoadStats

__all__ = ["Progress", "Trace", "TraceCache", "TraceError", "load", "use_cache"]


def load(
    path: str | os.PathLike,
    progress: Progress | None = None,
    use_cache: bool = True,
    stats: LoadStats | None = None,
) -> Trace:
    """Open any supported trace: Kineto JSON(.gz), nsys SQLite(.gz) or .nsys-rep, an XSpace ``.xplane.pb``
    (or a JAX profile directory: its newest run), a rocprofv3 results JSON.

    A trace built before (same content) comes from the installed cache (``use_cache``; the SQLite
    unpacked from an nsys ``.sqlite.gz`` is kept there whatever ``use_cache`` says). ``stats`` (Kineto)
    is filled with how the events were read.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = _profile_file(path)
    head = _head(path)
    damaged = ""
    cache = installed() if use_cache else None
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
    """The reader of ``path``'s format. The nsys and Kineto readers are imported when a file of theirs is
    opened (each ~0.12 s: sqlite3 and the page decoder, pyarrow); the others cost ~5 ms and come with
    the package."""
    if head.startswith(SQLITE_MAGIC) or path.endswith(".nsys-rep") or _gunzipped_head(head).startswith(SQLITE_MAGIC):
        from gaplens.loaders.nsys.reader import load_nsys

        return _require_events(path, load_nsys(path, progress))
    if not head:
        raise TraceError(f"{path}: the file is empty")
    body = _gunzipped_head(head, len(head)) or head
    if looks_like_xplane(path, body):
        return _require_events(path, load_xplane(path, progress))
    if b'"rocprofiler-sdk-tool"' in body:
        return _require_events(path, load_rocprof(path, progress))
    if is_jax_trace_json(body):
        return _require_events(path, load_jax_trace_json(path, progress))
    if not head.startswith(GZIP_MAGIC) and body.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] not in (b"{", b"["):
        raise TraceError(f"{path}: not a trace gaplens reads (neither JSON, an SQLite export nor an XSpace protobuf)")
    from gaplens.loaders.kineto.reader import load_kineto

    return _require_events(path, load_kineto(path, progress, stats))


def _require_events(path: str, trace: Trace) -> Trace:
    """A trace with no duration event left is unusable; say what the loader dropped on the way."""
    if len(trace):
        return trace
    why = "; ".join(trace.meta.warnings) or "empty traceEvents"
    raise TraceError(f"{path}: the trace holds no duration events ({why})")


def _profile_file(folder: str) -> str:
    """The one host file of a JAX profile folder's newest run; several hosts are a job (``ranks``)."""
    found = runs(folder)
    if not found:
        raise TraceError(f"{folder}: is a directory, not a trace file (and holds no plugins/profile/<run>/*.xplane.pb)")
    hosts = found[0]
    if len(hosts) > 1:
        raise TraceError(
            f"{folder}: the newest run holds {len(hosts)} hosts ({os.path.basename(hosts[0])}, ...):"
            " open one file, or read them as a job with `gaplens ranks`"
        )
    return hosts[0]


def _gunzipped_head(head: bytes, size: int = 16) -> bytes:
    """The first decompressed bytes of a gzip file (b"" when not gzip or unreadable)."""
    if not head.startswith(GZIP_MAGIC):
        return b""
    try:
        return zlib.decompressobj(wbits=47).decompress(head, size)
    except zlib.error:
        return b""


def _head(path: str) -> bytes:
    """First bytes of a file, to sniff the format before reading it all."""
    return read_head(path, 4096)
