"""load(path) -> Trace: sniff the format by content, decompress, and dispatch to a reader."""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable

from loaders.model import Trace, TraceError

Progress = Callable[[str, float], None]

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"

__all__ = ["Trace", "TraceError", "load", "read_bytes"]


def read_bytes(path: str, progress: Progress | None = None) -> tuple[bytes, list[str]]:
    """File contents, gunzipped when the magic bytes say gzip (whatever the extension).

    A truncated gzip stream keeps what decompressed and says so; a corrupt one is an error.
    """
    raw = _read(path)
    if not raw.startswith(GZIP_MAGIC):
        return raw, []
    if progress is not None:
        progress("decompressing", 0.0)
    out = bytearray()
    d = zlib.decompressobj(wbits=47)
    try:
        view = memoryview(raw)
        chunk = 1 << 22
        for i in range(0, len(raw), chunk):
            out += d.decompress(view[i : i + chunk])
            if d.eof and d.unused_data:
                # Concatenated gzip members: keep going with a fresh decompressor.
                rest = d.unused_data
                d = zlib.decompressobj(wbits=47)
                out += d.decompress(rest)
            if progress is not None:
                progress("decompressing", min(1.0, (i + chunk) / len(raw)))
        out += d.flush()
    except zlib.error as exc:
        if not out:
            raise TraceError(f"{path}: corrupt gzip data ({exc})") from None
        return bytes(out), [f"corrupt gzip data after {len(out)} bytes: the rest is dropped"]
    if not d.eof:
        return bytes(out), [f"the gzip stream is truncated after {len(out)} bytes: the rest is dropped"]
    return bytes(out), []


def load(path: str | os.PathLike, progress: Progress | None = None, use_cache: bool = True) -> Trace:
    """Open any supported trace: Kineto JSON(.gz), nsys SQLite(.gz) or .nsys-rep.

    A trace built before (same absolute path, size and mtime) comes from the cache.
    """
    path = os.fspath(path)
    head = _head(path)
    if use_cache:
        from loaders import cache

        hit = cache.lookup(path)
        if hit is not None:
            hit.meta.path = path  # as the caller spelled it, like a fresh load
            return hit
    trace = _load(path, head, progress)
    if use_cache:
        if progress is not None:
            progress("caching", 1.0)
        cache.store(path, trace)
    return trace


def _load(path: str, head: bytes, progress: Progress | None) -> Trace:
    if head.startswith(SQLITE_MAGIC) or path.endswith(".nsys-rep") or _gunzipped_head(head).startswith(SQLITE_MAGIC):
        from loaders.nsys import load_nsys

        return load_nsys(path, progress)
    if not head:
        raise TraceError(f"{path}: the file is empty")
    from loaders.kineto import load_kineto, require_events

    return require_events(load_kineto(path, progress))


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
    return _read(path, 4096)


def _read(path: str, size: int = -1) -> bytes:
    """Read a file, turning OS errors into one-line TraceErrors."""
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory, not a trace file") from None
    except PermissionError:
        raise TraceError(f"{path}: permission denied") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror})") from None
