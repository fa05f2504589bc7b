"""File access shared by the loaders: regular files only, one-line errors, streamed gunzip. Reading only:
what gaplens writes, it writes through ``gaplens.store.files``.

Streaming keeps the peak memory near one block instead of the whole decompressed
document (Kineto files decompress 10-15x). A FIFO, a device or a socket passed as a
trace is refused before anything blocks on it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import zlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from gaplens.loaders.errors import TraceError

# zlib-ng inflates 2-5x faster than the system zlib (the gunzip thread paces a big load); same API and errors.
inflate: Any = zlib  # on a platform without its wheel
with contextlib.suppress(ImportError):
    from zlib_ng import zlib_ng as inflate

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
SQLITE_MAGIC = b"SQLite format 3\x00"
#: The one progress callback of every loader: ``progress(stage, fraction in [0, 1])``.
Progress = Callable[[str, float], None]


def open_regular(path: str) -> BinaryIO:
    """Open a regular file for reading; anything else (FIFO, device, socket, folder) is a TraceError.

    The open itself does not block: a FIFO with no writer would otherwise hang ``open()``.
    """
    with os_errors(path):
        _require_regular(path, os.stat(path).st_mode)  # a socket cannot even be opened
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
        fd = os.open(path, flags)
    try:
        _require_regular(path, os.fstat(fd).st_mode)  # what was opened, in case the path changed
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _require_regular(path: str, mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise TraceError(f"{path}: is a directory, not a trace file")
    if not stat.S_ISREG(mode):
        raise TraceError(f"{path}: not a regular file (a pipe, device or socket), refused")


def file_size(path: str) -> int:
    """The file's size in bytes, 0 when it cannot be looked at (its reader then says why): the job's
    runner sizes its batches by it, and analysis/ asks the loaders for anything on disk."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def read_head(path: str, size: int = -1) -> bytes:
    """The first ``size`` bytes of a regular file (all when -1), OS errors turned into TraceErrors."""
    with open_regular(path) as fh, os_errors(path):
        return fh.read(size)


@contextlib.contextmanager
def os_errors(path: str, doing: str = "read") -> Iterator[None]:
    """Turn the OS errors of reading ``path`` into one-line TraceErrors."""
    try:
        yield
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory, not a trace file") from None
    except PermissionError:
        raise TraceError(f"{path}: permission denied") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot {doing} ({exc.strerror or exc})") from None


# Compressed bytes per read: ~1.4 MB of Kineto JSON, under a block. Each read takes the GIL back
# once, which costs up to the switch interval while the parse threads hold it: fewer, larger reads.
READ_SIZE = 1 << 17
#: Most bytes one inflate call hands out: ~3x a normal read's output (Kineto gzips ~10x), so real files never
#: reach it, while a blank bomb (~1000x) comes out in pieces the framer can drop as it goes.
MAX_INFLATE = 4 << 20


class Source:
    """Decompressed chunks of one file, with what went wrong on the way in ``warnings``."""

    def __init__(self, path: str, progress: Progress | None = None, stage: str = "parsing") -> None:
        self.path = path
        self.progress = progress
        self.stage = stage
        self.warnings: list[str] = []
        with os_errors(path):
            self.size = os.path.getsize(path)
        self.read = 0  # compressed bytes consumed, for progress
        self.inflated = 0  # bytes handed out (decompressed)
        self._reported = -1.0

    def chunks(self) -> Iterator[bytes]:
        """The decompressed bytes in blocks; a UTF-8 byte-order mark at the start is dropped."""
        with open_regular(self.path) as fh, os_errors(self.path):
            first = fh.read(READ_SIZE)
            if not first:
                raise TraceError(f"{self.path}: the file is empty")
            blocks = self._plain(fh, first) if not first.startswith(GZIP_MAGIC) else self._gunzip(fh, first)
            head = next(blocks, b"")
            self.inflated += len(head)
            yield head[len(UTF8_BOM) :] if head.startswith(UTF8_BOM) else head
            for block in blocks:
                self.inflated += len(block)
                yield block

    def inflated_size(self) -> int:
        """The whole file's decompressed size, estimated from the ratio so far (the size itself when plain)."""
        return int(self.size * self.inflated / self.read) if self.read else self.size

    def _tick(self, n: int) -> None:
        self.read += n
        if self.progress is None:
            return
        done = min(1.0, self.read / max(self.size, 1))
        if done - self._reported >= 0.01 or done == 1.0:  # at most ~100 reports per file
            self._reported = done
            self.progress(self.stage, done)

    def _plain(self, fh, first: bytes) -> Iterator[bytes]:
        block = first
        while block:
            self._tick(len(block))
            yield block
            block = fh.read(READ_SIZE * 8)

    def _gunzip(self, fh, first: bytes) -> Iterator[bytes]:
        # Each call inflates at most MAX_INFLATE bytes: 128 KB of a blank bomb would otherwise be ~128 MB at once.
        d = inflate.decompressobj(wbits=47)
        out_total = 0
        block = first
        while block:
            self._tick(len(block))
            data = block
            while data:
                try:
                    out = d.decompress(data, MAX_INFLATE)
                except inflate.error as exc:
                    if not out_total:
                        raise TraceError(f"{self.path}: corrupt gzip data ({exc})") from None
                    self.warnings.append(f"corrupt gzip data after {out_total} bytes: the rest is dropped")
                    return
                if out:
                    out_total += len(out)
                    yield out
                if not d.eof:
                    data = d.unconsumed_tail
                    continue
                data = d.unused_data
                if data and not data.startswith(GZIP_MAGIC):
                    # A whole member, then bytes that are not gzip: keep the member, say so.
                    junk = len(data) + (self.size - self.read)
                    self.warnings.append(f"{junk} bytes after the gzip data are not gzip: ignored")
                    return
                if data:  # concatenated gzip members: continue with a fresh decompressor
                    d = inflate.decompressobj(wbits=47)
            block = fh.read(READ_SIZE)
        if not d.eof:
            tail = d.flush()
            if tail:
                out_total += len(tail)
                yield tail
            if not out_total:
                raise TraceError(f"{self.path}: truncated gzip data, nothing could be decompressed")
            self.warnings.append(f"the gzip stream is truncated after {out_total} bytes: the rest is dropped")
