"""File access shared by the loaders: one-line errors, streamed gunzip, and the cache folder.

Streaming keeps the peak memory near one block instead of the whole decompressed
document (Kineto files decompress 10-15x).
"""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from gaplens.loaders.model import TraceError

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
#: The one progress callback of every loader: ``progress(stage, fraction in [0, 1])``.
Progress = Callable[[str, float], None]


def read_head(path: str, size: int = -1) -> bytes:
    """The first ``size`` bytes of a file (all when -1), OS errors turned into TraceErrors."""
    with os_errors(path), open(path, "rb") as fh:
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


READ_SIZE = 1 << 15  # compressed bytes per read: ~0.4 MB of Kineto JSON, under a block


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
        self._reported = -1.0

    def chunks(self) -> Iterator[bytes]:
        with os_errors(self.path), open(self.path, "rb") as fh:
            first = fh.read(READ_SIZE)
            if not first:
                raise TraceError(f"{self.path}: the file is empty")
            if not first.startswith(GZIP_MAGIC):
                yield from self._plain(fh, first)
            else:
                yield from self._gunzip(fh, first)

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
        d = zlib.decompressobj(wbits=47)
        out_total = 0
        block = first
        while block:
            self._tick(len(block))
            try:
                out = d.decompress(block)
                while d.eof and d.unused_data:
                    # Concatenated gzip members: continue with a fresh decompressor.
                    rest = d.unused_data
                    d = zlib.decompressobj(wbits=47)
                    out += d.decompress(rest)
            except zlib.error as exc:
                if not out_total:
                    raise TraceError(f"{self.path}: corrupt gzip data ({exc})") from None
                self.warnings.append(f"corrupt gzip data after {out_total} bytes: the rest is dropped")
                return
            if out:
                out_total += len(out)
                yield out
            block = fh.read(READ_SIZE)
        if not d.eof:
            tail = d.flush()
            if tail:
                out_total += len(tail)
                yield tail
            if not out_total:
                raise TraceError(f"{self.path}: truncated gzip data, nothing could be decompressed")
            self.warnings.append(f"the gzip stream is truncated after {out_total} bytes: the rest is dropped")
