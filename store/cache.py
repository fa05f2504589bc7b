"""The cache: built Traces (Arrow IPC + a small JSON), so a trace opened twice opens at once, and the SQLite
unpacked from an nsys ``.sqlite.gz`` (or exported from a ``.nsys-rep``), so it is unpacked once.

``gaplens.store.install`` hands this module to the loaders (``loaders.use_cache``); they never write
a file themselves. Entries live in ``$GAPLENS_CACHE_DIR``, else ``$XDG_CACHE_HOME/gaplens``, else
``~/.cache/gaplens``; one entry per trace *content* (``content_id``: the size, both ends and
16 blocks sampled between them), so a trace copied or moved to another path is the same entry,
valid while the loaders' code is unchanged. A small file per path remembers the content id it
had at a size, mtime and inode, so an unchanged file is looked up without reading it. Writes are
atomic (``files.atomic_write``) and a token shared by the two files catches a pair torn by
concurrent writers (two paths of one content may write one entry at once). Every entry carries
checksums of its content (CRC-32, verified on each read): a damaged entry is a miss that the
caller rebuilds, with a warning, never different readings. Entries are never read or written
through a symlink. Anything odd on reading (stale, corrupt, another version) is a miss, never an
error. The trace file itself is never touched. Unpacked exports: see their section below. The
folder is kept under a size, the entries used longest ago removed first (``trim``).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import os
import secrets
import stat
import tempfile
import weakref
from pathlib import Path
from typing import BinaryIO

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.ipc as ipc

from gaplens.loaders.cache_hook import Writer
from gaplens.loaders.columns import numpy_dtype, view
from gaplens.loaders.files import open_regular, os_errors
from gaplens.loaders.model import Device, Kind, Lane, LaneKind, Meta, Trace
from gaplens.loaders.rows import running_max_per_row
from gaplens.store import trim
from gaplens.store.files import atomic_write, cache_dir, checksum, checksum_more, map_own, own_dir, read_own

VERSION = 3  # bump when the entry layout changes; loader code changes are caught by _code_stamp
#: Bytes hashed at each end of the file, and the blocks sampled evenly between them: a content id read
#: in a few milliseconds whatever the trace's size (about 3 MiB), that still changes when an edit
#: changes the size, either end or a sampled block. Notes use the two ends alone (store.notes).
ID_END_BYTES = 1 << 20
ID_SAMPLE_BYTES = 64 << 10
ID_SAMPLES = 16
COLUMNS = ("lane", "depth", "start_ns", "end_ns", "name_id", "kind", "corr", "bytes", "detail_id", "launch")


@functools.lru_cache(maxsize=1)
def _code_stamp() -> str:
    """Digest of the loaders' source (every subpackage) and of this module: an upgraded loader never serves
    an old build. (Since the cache moved to store/, it had digested store/ alone: a loader fix kept old entries.)"""
    from gaplens import loaders

    digest = hashlib.sha256()
    root = Path(loaders.__file__).resolve().parent
    for source in [*sorted(root.rglob("*.py")), Path(__file__).resolve()]:
        digest.update(str(source.relative_to(source.parents[1])).encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def content_id(path: str | os.PathLike) -> str:
    """The trace's content identity: its size and a hash of both ends and of ``ID_SAMPLES`` blocks between."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        h = hashlib.blake2b(digest_size=16)
        h.update(str(size).encode())
        h.update(fh.read(ID_END_BYTES))
        if size > 2 * ID_END_BYTES:
            inner = size - 2 * ID_END_BYTES
            for k in range(ID_SAMPLES):
                fh.seek(ID_END_BYTES + inner * k // ID_SAMPLES)
                h.update(fh.read(ID_SAMPLE_BYTES))
        if size > ID_END_BYTES:
            fh.seek(max(ID_END_BYTES, size - ID_END_BYTES))
            h.update(fh.read(ID_END_BYTES))
    return f"{size}:{h.hexdigest()}"


def _path_file(absolute: str) -> Path:
    return (
        cache_dir() / "traces" / "paths" / hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    )


def _seen(absolute: str, st: os.stat_result) -> dict:
    return {"path": absolute, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "dev": st.st_dev}


def _known_id(absolute: str, st: os.stat_result) -> str | None:
    """The content id remembered for this path while it keeps its size, mtime and inode (else None)."""
    try:
        got = orjson.loads(read_own(_path_file(absolute)))
        want = _seen(absolute, st)
        if isinstance(got, dict) and all(got.get(k) == v for k, v in want.items()) and isinstance(got.get("id"), str):
            return got["id"]
    except Exception:  # absent, torn, a symlink: read the file's ends instead
        pass
    return None


def _note_id(absolute: str, st: os.stat_result, cid: str) -> None:
    """Remember ``cid`` for this path (best effort: a failure costs the next lookup one content read)."""
    try:
        folder = own_dir(_path_file(absolute).parent, create=True)
        if folder is not None:
            atomic_write(_path_file(absolute), orjson.dumps({**_seen(absolute, st), "id": cid}))
    except Exception:
        pass


def _entry(path: str) -> tuple[Path, dict, tuple[str, os.stat_result, str] | None]:
    """Base path of the entry for a trace file, the stamp that keeps it valid, and (path, stat, id) to
    remember when the id was read from the file rather than from the path's own record."""
    absolute = os.path.abspath(path)
    st = os.stat(absolute)
    cid = _known_id(absolute, st)
    fresh = None
    if cid is None:
        cid = content_id(absolute)
        fresh = (absolute, st, cid)
    stamp = {"version": VERSION, "code": _code_stamp(), "id": cid}
    digest = hashlib.sha256(cid.encode()).hexdigest()[:32]
    return cache_dir() / "traces" / digest, stamp, fresh


def lookup(path: str) -> Trace | None:
    """The cached Trace of ``path``, or None when absent, stale or unreadable."""
    return lookup_checked(path)[0]


def lookup_checked(path: str) -> tuple[Trace | None, str]:
    """(the cached Trace of ``path`` or None, a warning line when an entry was there but damaged).

    The ``.json`` starts with a line of checksums, of the rest of itself and of the ``.arrow``; both
    are verified before anything is read from them, so a flipped byte is a miss (and the caller
    rebuilds the entry), never different readings. Nothing is read through a symlink.
    """
    try:
        base, stamp, fresh = _entry(path)
        if own_dir(base.parent, create=False) is None:
            return None, ""
        raw = read_own(base.with_suffix(".json"))
    except Exception:  # absent, unreadable, a symlink: a plain miss
        return None, ""
    damaged = f"the cached copy of {path} was damaged (checksum mismatch): read from the trace again"
    try:
        head, _, body = raw.partition(b"\n")
        sums = orjson.loads(head)
        if not isinstance(sums, dict) or sums.get("version") != VERSION:
            return None, ""  # an entry of another layout
        if checksum(body) != sums.get("info_crc"):
            return None, damaged
        info = orjson.loads(body)
        if info.get("stamp") != stamp:
            return None, ""  # stale: the trace or the loaders changed
        # Mapped, not read: the columns are copied once, from the page cache into their arrays.
        mapped = map_own(base.with_suffix(".arrow"))
        if len(mapped) != sums.get("arrow_size") or checksum(mapped) != sums.get("arrow_crc"):
            return None, damaged
        table = ipc.open_file(pa.BufferReader(pa.py_buffer(mapped))).read_all()
        if (table.schema.metadata or {}).get(b"token", b"").decode() != info.get("token"):
            return None, ""
        # the checksums prove the bytes, not the entry: one written wrong is rebuilt too (issue 31)
        wrong = _bad_lists(table, info)
        if not wrong:
            trace = _trace(table, info)
            wrong = _bad_columns(trace)
        if wrong:
            return None, f"the cached copy of {path} was inconsistent ({wrong}): read from the trace again"
        trace.meta.path = path  # the entry may have been built from a copy at another path
        trim.touch(base.with_suffix(".json"))  # used now: the last to go when the cache is trimmed
        _remember(trace, base, info["token"])
        if fresh is not None:
            _note_id(*fresh)
        return trace, ""
    except Exception:  # whatever the damage, a miss
        return None, damaged


def store(path: str, trace: Trace) -> bool:
    """Save ``trace`` as the entry of ``path``; False (and nothing written) when that fails."""
    try:
        base, stamp, fresh = _entry(path)
        if own_dir(base.parent, create=True) is None:
            return False
        token = secrets.token_hex(8)
        info = orjson.dumps({"stamp": stamp, "token": token, **_describe(trace)}, option=orjson.OPT_NON_STR_KEYS)
        arrays = [_arrow(getattr(trace, c)) for c in COLUMNS]
        table = pa.Table.from_arrays(arrays, names=list(COLUMNS)).replace_schema_metadata({"token": token})
        sums: dict = {"version": VERSION}
        atomic_write(base.with_suffix(".arrow"), lambda fh: _write_ipc(fh, table, sums))
        sums["info_crc"] = checksum(info)
        atomic_write(base.with_suffix(".json"), orjson.dumps(sums) + b"\n" + info)
        _remember(trace, base, token)
        if fresh is not None:
            _note_id(*fresh)
        with contextlib.suppress(Exception):  # the entry is written: trimming the others is best effort
            trim.trim(keep=base.with_suffix(".json"))
        return True
    except Exception:  # caching is best effort: the load already succeeded
        return False


# id(trace) -> (weak reference, entry base path, entry token) of the Traces this module read or stored.
_ORIGINS: dict[int, tuple[weakref.ref, Path, str]] = {}


def origin(trace: Trace) -> tuple[Path, str] | None:
    """(base path, token) of the entry this very Trace object was read from or stored as, else None.

    store.readings keeps readings beside the entry under its token: a rebuilt entry has a new token.
    """
    hit = _ORIGINS.get(id(trace))
    return (hit[1], hit[2]) if hit is not None and hit[0]() is trace else None


def _remember(trace: Trace, base: Path, token: str) -> None:
    key = id(trace)

    def forget(ref: weakref.ref) -> None:
        if _ORIGINS.get(key, (None,))[0] is ref:
            del _ORIGINS[key]

    _ORIGINS[key] = (weakref.ref(trace, forget), base, token)


def _arrow(column: np.ndarray) -> pa.Array:
    """A numpy column as an Arrow array over the same memory (``pa.array`` would import pandas)."""
    column = np.ascontiguousarray(column)
    return pa.Array.from_buffers(pa.from_numpy_dtype(column.dtype), column.size, [None, pa.py_buffer(column)])


class _Summed:
    """A binary file that keeps the size and CRC-32 of what is written through it (Arrow writes here)."""

    def __init__(self, fh) -> None:
        self.fh, self.size, self.crc = fh, 0, 0
        self.closed = False

    def write(self, data) -> int:
        self.crc = checksum_more(data, self.crc)
        self.size += len(memoryview(data).cast("B"))
        return self.fh.write(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.fh.flush()

    def close(self) -> None:
        self.closed = True


def _write_ipc(fh, table: pa.Table, sums: dict) -> None:
    """The table as an IPC file; ``sums`` gets the file's size and checksum as it is written."""
    out = _Summed(fh)
    with ipc.new_file(out, table.schema) as writer:
        writer.write_table(table)
    sums["arrow_size"], sums["arrow_crc"] = out.size, out.crc


def _describe(trace: Trace) -> dict:
    m = trace.meta
    return {
        "meta": {
            "source_format": m.source_format,
            "source_version": m.source_version,
            "path": m.path,
            "origin_ns": m.origin_ns,
            "devices": [[d.id, d.name, d.properties] for d in m.devices],
            "processes": [[k, v] for k, v in m.processes.items()],
            "threads": [[k[0], k[1], v] for k, v in m.threads.items()],
            "lacks": m.lacks,
            "warnings": m.warnings,
            "extra": m.extra,
        },
        "lanes": [
            [ln.id, int(ln.kind), ln.name, ln.pid, ln.tid, ln.device, ln.stream, list(ln.sort_key)]
            for ln in trace.lanes
        ],
        "names": trace.names,
        "details": trace.details,
    }


#: The id columns and the list each indexes (an entry's shape check).
_ID_RANGES = {"lane": "lanes", "name_id": "names", "detail_id": "details"}


def _bad_lists(table: pa.Table, info: dict) -> str:
    """What makes an entry's lists unusable ("" when nothing): checked before the Trace is built."""
    names, details, lanes = info.get("names"), info.get("details"), info.get("lanes")
    if not (isinstance(names, list) and isinstance(details, list) and isinstance(lanes, list)):
        return "names, details or lanes missing"
    if not all(isinstance(x, str) for x in names) or not all(isinstance(x, str) for x in details):
        return "a name or detail that is not text"
    if any(not isinstance(ln, list) or len(ln) != 8 or ln[0] != i for i, ln in enumerate(lanes)):
        return "lanes out of order or malformed"
    if list(table.column_names) != list(COLUMNS) or any(not pa.types.is_integer(t) for t in table.schema.types):
        return "other columns"
    return ""


def _bad_columns(trace: Trace) -> str:
    """What makes a built Trace's columns unusable ("" when nothing): an id outside its list, an unknown kind,
    a launch outside the events, events out of the (lane, depth, start) order the window queries rely on.
    Vectorised over the Trace's own arrays (no copy): ~3 ms at 1.19M events."""
    n = len(trace)
    if n == 0:
        return ""
    counts = {"lanes": len(trace.lanes), "names": len(trace.names), "details": len(trace.details)}
    for column, of in _ID_RANGES.items():
        ids = getattr(trace, column)
        if int(ids.min()) < 0 or int(ids.max()) >= counts[of]:
            return f"{column} outside the {counts[of]} {of}"
    if int(trace.kind.min()) < 0 or int(trace.kind.max()) > max(Kind):
        return "an unknown event kind"
    if int(trace.launch.min()) < -1 or int(trace.launch.max()) >= n:
        return "a launch outside the events"
    if int(trace.depth.min()) < 0 or bool((trace.end_ns < trace.start_ns).any()):
        return "a negative depth or an event that ends before it starts"
    rows = trace.row_lane.astype(np.int64) * 65536 + trace.row_depth.astype(np.int64)
    back = np.diff(trace.start_ns) < 0
    back[trace.row_offsets[1:-1] - 1] = False  # a new row may start earlier
    if bool((np.diff(rows) <= 0).any()) or bool(back.any()):
        return "events out of order"
    return ""


def _column(chunked: pa.ChunkedArray) -> np.ndarray:
    """One owned numpy array of a column, chunk by chunk (``ChunkedArray.to_numpy`` would import pandas)."""
    parts = [view(chunk) for chunk in chunked.chunks]
    if len(parts) == 1:
        return parts[0].copy()
    return np.concatenate(parts) if parts else np.empty(0, numpy_dtype(chunked.type))


def _trace(table: pa.Table, info: dict) -> Trace:
    m = info["meta"]
    meta = Meta(
        source_format=m["source_format"],
        source_version=m["source_version"],
        path=m["path"],
        origin_ns=m["origin_ns"],
        devices=[Device(i, n, p) for i, n, p in m["devices"]],
        processes={k: v for k, v in m["processes"]},
        threads={(p, t): v for p, t, v in m["threads"]},
        lacks=m["lacks"],
        warnings=m["warnings"],
        extra=m["extra"],
    )
    lanes = [Lane(i, LaneKind(k), n, p, t, d, s, tuple(sk)) for i, k, n, p, t, d, s, sk in info["lanes"]]
    # Copies: arrays from Arrow are read-only views of the mapped file, and readers may expect to own them.
    cols = {c: _column(table.column(c)) for c in COLUMNS}
    n = cols["lane"].size
    key = cols["lane"].astype(np.int64) * 65536 + cols["depth"].astype(np.int64)
    starts = np.concatenate(([0], np.flatnonzero(np.diff(key)) + 1)) if n else np.empty(0, np.int64)
    row_offsets = np.concatenate((starts, [n])).astype(np.int64)
    return Trace(
        meta=meta,
        lanes=lanes,
        names=info["names"],
        details=info["details"],
        row_lane=cols["lane"][starts].astype(np.int32),
        row_depth=cols["depth"][starts].astype(np.int16),
        row_offsets=row_offsets,
        row_maxend=running_max_per_row(cols["end_ns"], row_offsets),
        **cols,
    )


# ---- unpacked exports ----------------------------------------------------------------------------
# The SQLite inside an nsys ``.sqlite.gz`` (or exported from a ``.nsys-rep``), handed to the loaders
# through ``loaders.use_cache``: written once into the cache folder and read again while its source
# keeps its content. Its name hashes the source's absolute path and holds the CRC-32 and size of the
# source's whole content (not what ``stat`` says: a file planted at a name made from that would be read
# as this trace's export), and it is sealed with the CRC-32 of its own bytes, written as it is written:
# it is reused only while the seal holds (a file planted at its name, or a symlink, is rebuilt over).
# Names are those ``loaders/nsys_files.py`` gave them, so copies unpacked before the move still serve.


def unpacked(source: str, suffix: str, write: Writer) -> str:
    """The copy ``write`` makes of ``source`` (``suffix``: its kind, ".sqlite"), written once per content.

    Written atomically beside the entries (or, when the cache folder cannot be made, in a private temp
    folder); older copies of the same source path are dropped. The source is only read.
    """
    target = unpacked_path(source, suffix)
    target = _writable_dir(target.parent) / target.name
    if _sealed(target):
        trim.touch(_seal_path(target))
        return str(target)
    sums: list[int] = []

    def summed(fh: BinaryIO) -> None:
        out = _Summed(fh)
        write(out)
        sums[:] = [out.crc, out.size]

    atomic_write(target, summed)
    _seal(target, *sums)
    _prune_stale(target)
    with contextlib.suppress(Exception):  # best effort, like the write: the export is there
        trim.trim(keep=_seal_path(target))
    return str(target)


def unpacked_path(source: str, suffix: str) -> Path:
    """Where the copy of ``source`` goes: ``<stem>-<path hash>-<content crc><content size><suffix>``."""
    where = hashlib.sha1(os.path.abspath(source).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    crc, size = _content(source)
    stem = Path(source).name.split(".")[0][:40] or "trace"
    return cache_dir() / f"{stem}-{where}-{crc:08x}{size:x}{suffix}"


def _content(path: str) -> tuple[int, int]:
    """(CRC-32, size) of a file's bytes, read in blocks (the key of an unpacked copy)."""
    crc, size = 0, 0
    with open_regular(path) as fh, os_errors(path):
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
