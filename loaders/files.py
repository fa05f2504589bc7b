"""File access shared by the loaders: regular files only, one-line errors, streamed gunzip, atomic writes.

Streaming keeps the peak memory near one block instead of the whole decompressed
document (Kineto files decompress 10-15x). A FIFO, a device or a socket passed as a
trace is refused before anything blocks on it. ``atomic_write`` is the one way
gaplens writes a file (notes, exports, the caches): readers see the old file or the
new one, never half of one, and temp files left by a killed writer are swept.
"""

from __future__ import annotations

import contextlib
import glob
import mmap
import os
import secrets
import stat
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
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


def cache_dir() -> Path:
    """``$GAPLENS_CACHE_DIR``, else ``$XDG_CACHE_HOME/gaplens``, else ``~/.cache/gaplens``."""
    explicit = os.environ.get("GAPLENS_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gaplens"


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


# ---- the caches' own files ------------------------------------------------------------


def checksum(data) -> int:
    """CRC-32 of ``data`` (any buffer): zlib-ng's runs at ~18 GB/s here, so 60 MB of a 1M-event entry
    costs ~4 ms; it catches every flipped byte, which is what a cache must notice."""
    return int(inflate.crc32(data)) & 0xFFFFFFFF


def checksum_more(data, crc: int) -> int:
    """``checksum`` of what came before (``crc``) followed by ``data``."""
    return int(inflate.crc32(data, crc)) & 0xFFFFFFFF


def read_own(path: Path) -> bytes:
    """The bytes of a regular file the caches wrote, never through a symlink (ELOOP: an OSError)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def map_own(path: Path) -> mmap.mmap:
    """A read-only map of a regular file the caches wrote, never through a symlink."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            raise OSError(f"{path}: not a regular, non-empty file")
        return mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def own_dir(folder: Path, create: bool) -> Path | None:
    """``folder`` (inside the cache folder) when it is a real folder, never a symlink to elsewhere.

    Reading (``create`` False): None when it is absent or not a real folder. Writing: a symlink or
    file in its place is removed and a real folder made, so entries are never written through it.
    """
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        return folder
    if not create:
        return None
    if mode is not None:
        os.unlink(folder)  # a symlink (or a file) where the cache keeps its entries
    folder.mkdir(parents=True, exist_ok=True)
    return folder if stat.S_ISDIR(os.lstat(folder).st_mode) else None


# ---- writing ----------------------------------------------------------------------

Writer = Callable[[BinaryIO], object]
STALE_TEMP_S = 3600.0  # a temp file this old belongs to a writer that died


def temp_name(target: Path) -> Path:
    """A fresh temp path beside ``target``: ``.<name>.<random>.tmp`` (hidden, recognisable)."""
    return target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")


def atomic_write(target: str | os.PathLike, data: bytes | Writer, durable: bool = False) -> Path:
    """Write ``data`` (bytes, or a function writing to a binary file) to ``target`` atomically.

    A temp file in the same folder is renamed over the target, so a reader (or a
    crash) sees the old file or the new one. ``durable`` also fsyncs the file and the
    folder, for the user's own words (notes); caches skip it. The temp file is removed
    on any failure; temps of writers killed long ago are swept after a success.
    """
    target = Path(target)
    tmp = temp_name(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, bytes | bytearray | memoryview):
                fh.write(data)
            else:
                data(fh)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        with contextlib.suppress(OSError):  # make the rename itself durable; not possible everywhere
            dfd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
    remove_stale_temps(target)
    return target


def remove_stale_temps(target: Path, age_s: float = STALE_TEMP_S) -> int:
    """Remove temp files of ``target`` older than ``age_s`` (0: all of them); returns how many."""
    now = time.time()
    gone = 0
    for tmp in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
        with contextlib.suppress(OSError):
            if now - tmp.stat().st_mtime >= age_s:
                tmp.unlink()
                gone += 1
    return gone


@contextlib.contextmanager
def locked(target: Path) -> Iterator[None]:
    """Hold an exclusive lock for ``target`` (``flock`` on a hidden ``.<name>.lock`` beside it).

    Writers that read, merge and replace a shared file take it, so two of them never
    interleave. The lock dies with its process: a killed writer never blocks the next.
    Where ``fcntl`` does not exist, this is a no-op.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    lock = target.with_name(f".{target.name}.lock")
    # O_NOFOLLOW: a lock planted as a symlink is refused (OSError), never followed to create its target.
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
