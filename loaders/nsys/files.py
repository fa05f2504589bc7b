"""Where an nsys export is read from: gunzipped or exported once into a cache folder, opened read-only.

A cached copy is named after the content of its source and sealed with the CRC-32 of its own bytes;
it is reused only while the seal holds (a file planted at its name, or a symlink, is rebuilt over).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import shlex
import shutil
import sqlite3
import stat
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import BinaryIO

from gaplens.loaders.errors import TraceError
from gaplens.loaders.files import (
    GZIP_MAGIC,
    Progress,
    Source,
    atomic_write,
    cache_dir,
    checksum,
    checksum_more,
    map_own,
    open_regular,
    os_errors,
    read_head,
    read_own,
)

#: Seconds to wait for a writer's lock before giving up with a one-line error.
BUSY_TIMEOUT_S = 2.0
#: Seconds one connection may spend in SQLite before its query is interrupted: the largest real
#: exports read in well under a minute, so past this a query is not ending (a hostile schema).
QUERY_DEADLINE_S = 600.0
#: SQLite virtual-machine steps between two looks at the clock (~1 ms of work).
_PROGRESS_STEPS = 100_000


def cache_path(source: str, suffix: str) -> Path:
    """Cache file for ``source``: the name hashes the absolute path, the stem hashes the file's content.

    Content, not size and mtime: a file planted at a name made from what ``stat`` says would be read
    as this trace's export.
    """
    where = hashlib.sha1(os.path.abspath(source).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    crc, size = _content(source)
    stem = Path(source).name.split(".")[0][:40] or "trace"
    return cache_dir() / f"{stem}-{where}-{crc:08x}{size:x}{suffix}"


def _content(path: str | Path) -> tuple[int, int]:
    """(CRC-32, size) of a file's bytes, read in blocks (the key and the seal of the unpacked copies)."""
    crc, size = 0, 0
    with open_regular(str(path)) as fh, os_errors(str(path)):
        while block := fh.read(1 << 22):
            crc, size = checksum_more(block, crc), size + len(block)
    return crc, size


def _seal_path(target: Path) -> Path:
    return target.with_name(target.name + ".sum")


def _sealed(target: Path) -> bool:
    """Whether ``target`` is the copy gaplens wrote: a regular file (no symlink) whose CRC-32 and size
    match the seal written with it."""
    try:
        want = read_own(_seal_path(target)).split()
        mapped = map_own(target)
        return len(want) == 2 and int(want[1]) == len(mapped) and int(want[0]) == checksum(mapped)
    except (OSError, ValueError):
        return False


def _seal(target: Path, crc: int, size: int) -> None:
    atomic_write(_seal_path(target), f"{crc} {size}\n".encode())


def _writable_dir(folder: Path) -> Path:
    """The cache folder, or a private temp folder when it cannot be created."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.access(folder, os.W_OK):
            return folder
    except OSError:
        pass
    fallback = Path(tempfile.gettempdir()) / f"gaplens-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    with contextlib.suppress(FileExistsError):
        fallback.mkdir(mode=0o700)
    st = os.lstat(fallback)
    mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    if not stat.S_ISDIR(st.st_mode) or not mine or st.st_mode & 0o022:
        return Path(tempfile.mkdtemp(prefix="gaplens-"))  # someone else's folder in a shared /tmp: not reused
    return fallback


def _prune_stale(target: Path) -> None:
    """Drop older copies of the same source (same path hash, other content), and their seals."""
    prefix = target.name.rsplit("-", 1)[0] + "-"
    for old in target.parent.glob(glob.escape(prefix) + "*"):
        if old not in (target, _seal_path(target)) and not old.name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                old.unlink()


def gunzip_to_cache(path: str, progress: Progress | None = None) -> str:
    """Unpack a gzipped export once; later opens of the same content reuse the copy, once its seal holds."""
    target = cache_path(path, ".sqlite")
    target = _writable_dir(target.parent) / target.name
    if _sealed(target):
        return str(target)
    source = Source(path, progress, stage="decompressing")
    sums = [0, 0]

    def unpack(dst: BinaryIO) -> None:
        for chunk in source.chunks():
            dst.write(chunk)
            sums[0], sums[1] = checksum_more(chunk, sums[0]), sums[1] + len(chunk)
        if source.warnings:  # a cut database is no database: refuse instead of guessing
            raise TraceError(f"{path}: {source.warnings[0]}; the export inside is incomplete")

    with os_errors(path, "unpack"):
        atomic_write(target, unpack)
        _seal(target, sums[0], sums[1])
    _prune_stale(target)
    return str(target)


def export_command(rep: str, out: str | None = None) -> str:
    """The exact `nsys export` command that turns a report into the SQLite this loader reads."""
    out = out or str(Path(rep).with_suffix(".sqlite"))
    return f"nsys export --type sqlite -o {shlex.quote(out)} {shlex.quote(rep)}"


def export_rep(path: str, progress: Progress | None = None) -> str:
    """Export a ``.nsys-rep`` with the nsys CLI into the cache folder (once per unchanged report)."""
    if not os.path.isfile(path):
        raise TraceError(f"{path}: no such file" if not os.path.exists(path) else f"{path}: not a file")
    nsys = shutil.which("nsys")
    if nsys is None:
        raise TraceError(f"{path}: reading .nsys-rep needs nsys on PATH; export it first: {export_command(path)}")
    target = cache_path(path, ".sqlite")
    target = _writable_dir(target.parent) / target.name
    if _sealed(target):
        return str(target)
    tmp = target.with_name(target.name + f".{os.getpid()}.tmp.sqlite")
    if progress is not None:
        progress("exporting with nsys", 0.0)
    cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(tmp), path]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
        if done.returncode != 0 or not tmp.exists():
            last = (done.stderr or done.stdout or "").strip().splitlines()[-1:] or ["no output"]
            raise TraceError(f"{path}: nsys export failed ({last[0][:200]}); try: {export_command(path)}")
        os.replace(tmp, target)
        _seal(target, *_content(target))
    except (OSError, subprocess.SubprocessError) as exc:
        raise TraceError(f"{path}: could not run nsys export ({exc}); try: {export_command(path)}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    _prune_stale(target)
    return str(target)


def sqlite_uri(path: str, immutable: bool) -> str:
    """A read-only URI; ``immutable`` skips locking: our own copies, and WAL-mode files with no WAL content."""
    quoted = urllib.parse.quote(os.path.abspath(path))
    return f"file:{quoted}?mode=ro" + ("&immutable=1" if immutable else "")


def connect(uri: str) -> sqlite3.Connection:
    """A read-only connection that never writes or creates anything next to the file."""
    con = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    deadline = time.monotonic() + QUERY_DEADLINE_S
    con.set_progress_handler(lambda: time.monotonic() > deadline, _PROGRESS_STEPS)  # True interrupts
    con.execute("PRAGMA query_only = 1")
    # Text is decoded with replacement: a byte that is not UTF-8 must not fail a whole table.
    con.text_factory = _decode
    return con


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def resolve(path: str, progress: Progress | None = None) -> tuple[str, bool]:
    """The SQLite file to open for ``path`` and whether it is our own immutable cache copy."""
    if path.endswith(".nsys-rep"):
        return export_rep(path, progress), True
    head = read_head(path, 20)
    if head[:2] == GZIP_MAGIC:
        return gunzip_to_cache(path, progress), True
    if head[18:20] != WAL_MODE:
        return path, False  # rollback journal: mode=ro creates nothing beside the file
    # A WAL-mode file: even mode=ro creates -wal and -shm beside it. With no WAL content the file
    # is whole, so it opens immutable; WAL content is read from a private copy (nothing written beside).
    wal = f"{path}-wal"
    if not os.path.exists(wal) or os.path.getsize(wal) == 0:
        return path, True
    return _private_wal_copy(path, wal), True


WAL_MODE = b"\x02\x02"  # SQLite header bytes 18-19 (write/read format versions) of a WAL-mode database


def _private_wal_copy(path: str, wal: str) -> str:
    """The database and its -wal copied into a temp folder and checkpointed there (removed at exit)."""
    import atexit

    folder = tempfile.mkdtemp(prefix="gaplens-wal-")
    atexit.register(shutil.rmtree, folder, True)
    copy = os.path.join(folder, "export.sqlite")
    with os_errors(path):
        shutil.copyfile(path, copy)
        shutil.copyfile(wal, copy + "-wal")
    try:
        con = sqlite3.connect(copy)
        try:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            con.execute("PRAGMA journal_mode=DELETE")
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise TraceError(f"{path}: cannot read its -wal ({exc})") from None
    return copy
