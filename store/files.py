"""How gaplens writes a file, and reads back the files it wrote: atomic writes, locks, the cache folder.

``atomic_write`` is the one way gaplens writes a file (notes, exports, the caches): readers see the old
file or the new one, never half of one, and temp files left by a killed writer are swept. The caches
read their own files back never through a symlink, and check them with a CRC-32.
"""

from __future__ import annotations

import contextlib
import glob
import mmap
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from gaplens.loaders.files import inflate


def cache_dir() -> Path:
    """``$GAPLENS_CACHE_DIR``, else ``$XDG_CACHE_HOME/gaplens``, else ``~/.cache/gaplens``."""
    explicit = os.environ.get("GAPLENS_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gaplens"


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
