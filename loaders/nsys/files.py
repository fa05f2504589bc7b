"""Where an nsys export is read from, opened read-only: the file itself, or the SQLite unpacked from it.

A ``.sqlite.gz`` is gunzipped and a ``.nsys-rep`` exported with the nsys CLI; the SQLite that comes
out goes where the installed cache keeps it (``loaders.cache_hook``: the store's, keyed by the
source's content and sealed), so the next load of the same content reads it again. Without a cache
installed (a library user calling ``loaders.load``) it goes to a private temp folder removed once the
load has read it: the loaders never choose a place on disk that outlives the load. The trace file is
never modified, and nothing is created beside it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sqlite3
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

from gaplens.loaders import cache_hook
from gaplens.loaders.cache_hook import Sink, Writer
from gaplens.loaders.errors import TraceError
from gaplens.loaders.files import GZIP_MAGIC, Progress, Source, os_errors, read_head

#: Seconds to wait for a writer's lock before giving up with a one-line error.
BUSY_TIMEOUT_S = 2.0
#: Seconds one connection may spend in SQLite before its query is interrupted: the largest real
#: exports read in well under a minute, so past this a query is not ending (a hostile schema).
QUERY_DEADLINE_S = 600.0
#: Seconds `nsys export` may run: a report of hours exports in minutes, so past this it is stuck.
EXPORT_TIMEOUT_S = 3600
#: SQLite virtual-machine steps between two looks at the clock (~1 ms of work).
_PROGRESS_STEPS = 100_000
#: The suffix of the SQLite unpacked or exported from a source (the cache's names have always ended so).
UNPACKED_SUFFIX = ".sqlite"
WAL_MODE = b"\x02\x02"  # SQLite header bytes 18-19 (write/read format versions) of a WAL-mode database


@contextlib.contextmanager
def opened(path: str, progress: Progress | None = None) -> Iterator[tuple[str, bool]]:
    """(the SQLite file to read for ``path``, whether it opens immutable) while the load reads it.

    Immutable (no locking): our own unpacked copies, and WAL-mode files with no WAL content. A WAL-mode
    file with WAL content is read from a private checkpointed copy, removed on exit like an unpacked one.
    """
    if path.endswith(".nsys-rep"):
        write = _exporter(path, progress)
    elif read_head(path, 20)[:2] == GZIP_MAGIC:
        write = _gunzipper(path, progress)
    else:
        with _plain(path) as found:
            yield found
        return
    cache = cache_hook.installed()
    if cache is not None:
        with os_errors(path, "unpack"):
            db = cache.unpacked(path, UNPACKED_SUFFIX, write)
        yield db, True
        return
    with tempfile.TemporaryDirectory(prefix="gaplens-") as folder:
        db = os.path.join(folder, "export" + UNPACKED_SUFFIX)
        with os_errors(path, "unpack"), open(db, "xb") as fh:
            write(fh)
        yield db, True


def _gunzipper(path: str, progress: Progress | None) -> Writer:
    """What writes the export inside a gzipped one; a truncated or damaged gzip is refused."""

    def write(dst: Sink) -> None:
        source = Source(path, progress, stage="decompressing")
        for chunk in source.chunks():
            dst.write(chunk)
        if source.warnings:  # a cut database is no database: refuse instead of guessing
            raise TraceError(f"{path}: {source.warnings[0]}; the export inside is incomplete")

    return write


def export_command(rep: str, out: str | None = None) -> str:
    """The exact `nsys export` command that turns a report into the SQLite this loader reads."""
    out = out or str(Path(rep).with_suffix(".sqlite"))
    return f"nsys export --type sqlite -o {shlex.quote(out)} {shlex.quote(rep)}"


def _exporter(path: str, progress: Progress | None) -> Writer:
    """What writes a ``.nsys-rep``'s SQLite export: nsys exports into a private temp folder, then the
    export is copied out. Refused at once when the report is not a file or nsys is not on PATH."""
    if not os.path.isfile(path):
        raise TraceError(f"{path}: no such file" if not os.path.exists(path) else f"{path}: not a file")
    nsys = shutil.which("nsys")
    if nsys is None:
        raise TraceError(f"{path}: reading .nsys-rep needs nsys on PATH; export it first: {export_command(path)}")

    def write(dst: Sink) -> None:
        if progress is not None:
            progress("exporting with nsys", 0.0)
        with tempfile.TemporaryDirectory(prefix="gaplens-export-") as folder:
            out = os.path.join(folder, "export" + UNPACKED_SUFFIX)
            cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", out, path]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False)
            except (OSError, subprocess.SubprocessError) as exc:
                raise TraceError(f"{path}: could not run nsys export ({exc}); try: {export_command(path)}") from None
            if done.returncode != 0 or not os.path.exists(out):
                last = (done.stderr or done.stdout or "").strip().splitlines()[-1:] or ["no output"]
                raise TraceError(f"{path}: nsys export failed ({last[0][:200]}); try: {export_command(path)}")
            with open(out, "rb") as fh:
                shutil.copyfileobj(fh, dst, 1 << 22)

    return write


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


@contextlib.contextmanager
def _plain(path: str) -> Iterator[tuple[str, bool]]:
    """An SQLite file read where it is; a WAL-mode one with WAL content from a private copy."""
    if read_head(path, 20)[18:20] != WAL_MODE:
        yield path, False  # rollback journal: mode=ro creates nothing beside the file
        return
    # A WAL-mode file: even mode=ro creates -wal and -shm beside it. With no WAL content the file
    # is whole, so it opens immutable; WAL content is read from a private copy (nothing written beside).
    wal = f"{path}-wal"
    if not os.path.exists(wal) or os.path.getsize(wal) == 0:
        yield path, True
        return
    with tempfile.TemporaryDirectory(prefix="gaplens-wal-") as folder:
        yield _checkpointed_copy(path, wal, folder), True


def _checkpointed_copy(path: str, wal: str, folder: str) -> str:
    """The database and its -wal copied into ``folder`` and checkpointed there."""
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
