"""Keep the cache folder under a size: the entries used longest ago go first.

Every trace opened stays in the cache (its built columns: ~55 MB per 1M events; an nsys export's
unpacked SQLite: as big as the export), and on a shared GPU box the home folder has a quota that
nothing else would ever give back. After each write (``store.cache``) the cache's entries are
summed; past the limit (``$GAPLENS_CACHE_MAX_MB``, default ``DEFAULT_MAX_MB``) the least recently
used are removed until the cache holds at most ``TRIM_TO`` of it. An entry's last use is its
``.json``'s (or seal's) mtime, which a hit touches. Only the cache's own entries are counted or
removed (``traces/<digest>.*`` and the unpacked ``*.sqlite`` with their seals): not the path
records, not other folders, never through a symlink. An entry another process is reading stays
readable (its files are open or mapped); one removed before it is opened is a miss, rebuilt.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from gaplens.store.files import cache_dir

#: The cache's size limit when ``$GAPLENS_CACHE_MAX_MB`` does not say: about thirty traces of 1M
#: events, or the unpacked exports of a day's profiling, within a home folder's usual quota.
DEFAULT_MAX_MB = 2048
#: Trimmed to this share of the limit, so that the next few writes do not each trim again.
TRIM_TO = 0.8


def limit_bytes() -> int:
    """The cache's size limit in bytes: ``$GAPLENS_CACHE_MAX_MB`` (MiB), else (unset, not a finite
    positive number) the default."""
    text = os.environ.get("GAPLENS_CACHE_MAX_MB", "")
    try:
        mb = float(text) if text.strip() else DEFAULT_MAX_MB
    except ValueError:
        mb = DEFAULT_MAX_MB
    return int((mb if math.isfinite(mb) and mb > 0 else DEFAULT_MAX_MB) * (1 << 20))


@dataclass
class Entry:
    """One cache entry: its files (removed in this order: the one that makes it an entry first) and folders."""

    files: list[Path]
    folders: list[Path]
    size: int
    used: float  # the mtime of its first file: the last write or hit


def _size(path: Path) -> tuple[int, float, bool]:
    """(bytes, mtime, is a plain file) of ``path``, not following a symlink; (0, 0, False) when absent."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0, 0.0, False
    return st.st_size, st.st_mtime, stat.S_ISREG(st.st_mode)


def _folder_size(folder: Path) -> int:
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return 0
        return sum(_size(p)[0] for p in folder.iterdir())
    except OSError:
        return 0


def entries(root: Path | None = None) -> list[Entry]:
    """The cache's entries, whatever their state (a half-written one counts too)."""
    root = cache_dir() if root is None else root
    out: list[Entry] = []
    traces = root / "traces"
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(traces).st_mode):
            for info in traces.glob("*.json"):
                size, used, plain = _size(info)
                if not plain:
                    continue
                arrow, readings = info.with_suffix(".arrow"), info.with_suffix(".readings")
                out.append(Entry([info, arrow], [readings], size + _size(arrow)[0] + _folder_size(readings), used))
            for arrow in traces.glob("*.arrow"):  # a write cut between its two files leaves the columns alone
                size, used, plain = _size(arrow)
                if plain and not os.path.lexists(arrow.with_suffix(".json")):
                    out.append(Entry([arrow], [arrow.with_suffix(".readings")], size, used))
    with contextlib.suppress(OSError):
        for export in root.glob("*.sqlite"):
            seal = export.with_name(export.name + ".sum")
            size, used, plain = _size(export)
            if plain:
                out.append(Entry([seal, export], [], size + _size(seal)[0], max(used, _size(seal)[1])))
    return out


def touch(path: Path) -> None:
    """Mark the entry whose first file is ``path`` as just used (best effort: a read-only cache stays as it is)."""
    with contextlib.suppress(OSError):
        if not os.path.islink(path):
            os.utime(path)


#: Writes between two full looks at the cache folder while this process's running total stays under the
#: limit: a job read in one process writes an entry per rank, and a look per write (51 ms at 1,000
#: entries, 444 ms at 10,000, measured) made its writes cost the square of its ranks (~25 s of looks
#: for 1,000 ranks). Past that many writes, a quarter of the entries the last look found: the looks'
#: cost then grows with the writes, not with their square. Other processes' writes are seen at the next look.
RESCAN_WRITES = 64
# cache folder -> [bytes after the last look plus writes since, writes since, entries at the last look]
_ESTIMATES: dict[Path, list[int]] = {}


def _written(keep: Path) -> int:
    """Bytes of the entry whose first file is ``keep`` (a trace's ``.json`` or an export's seal)."""
    if keep.suffix == ".json":
        return _size(keep)[0] + _size(keep.with_suffix(".arrow"))[0] + _folder_size(keep.with_suffix(".readings"))
    return _size(keep)[0] + _size(keep.with_name(keep.name.removesuffix(".sum")))[0]


def trim(keep: Path | None = None, root: Path | None = None, limit: int | None = None) -> int:
    """Remove the least recently used entries while the cache is over its limit; the bytes removed.

    ``keep`` is a file of the entry just written, which stays whatever its age. The folder is looked at
    whole when this process's running total (the last look's, plus what it wrote since) passes the
    limit, and every ``RESCAN_WRITES`` writes (or a quarter of the entries last seen, when more).
    """
    limit = limit_bytes() if limit is None else limit
    root = cache_dir() if root is None else root
    known = _ESTIMATES.get(root)
    if known is not None and keep is not None and known[1] < max(RESCAN_WRITES, known[2] // 4):
        known[0] += _written(keep)
        known[1] += 1
        if known[0] <= limit:
            return 0
    found = entries(root)
    total = sum(e.size for e in found)
    _ESTIMATES[root] = [total, 0, len(found)]
    if total <= limit:
        return 0
    removed = 0
    for entry in sorted(found, key=lambda e: e.used):
        if total - removed <= limit * TRIM_TO:
            break
        if keep is not None and keep in entry.files:
            continue
        for path in entry.files:
            with contextlib.suppress(OSError):
                os.unlink(path)  # a symlink itself, never what it points at
        for folder in entry.folders:
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(os.lstat(folder).st_mode):
                    shutil.rmtree(folder, ignore_errors=True)
        removed += entry.size
    _ESTIMATES[root][0] = total - removed
    return removed
