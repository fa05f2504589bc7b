"""Nsight Systems SQLite exports (.sqlite, .sqlite.gz, .nsys-rep via the nsys CLI) into the lane model.

Covers the schema generations in FORMATS.md Part 2 (2022.2 → 2025.3): tables are probed,
never assumed; correlation ids join API calls to GPU work per process; the file is opened
read-only and never modified. Each table is fetched in bulk (see ``nsys_sql``).
"""

from __future__ import annotations

import os
import sqlite3

import numpy as np

from gaplens.loaders import heap
from gaplens.loaders.build import build_columns
from gaplens.loaders.errors import TraceError
from gaplens.loaders.files import Progress
from gaplens.loaders.kinds import LaneKind
from gaplens.loaders.meta import Device, Lane, Meta
from gaplens.loaders.nsys.cuda import (
    GPU_TABLES,
    KERNEL,
    RUNTIME,
    PartReader,
    read_api,
    read_graphs,
    read_kernels,
    read_memcpy,
    read_memset,
    read_osrt,
    read_overhead,
    read_sync,
)
from gaplens.loaders.nsys.files import QUERY_DEADLINE_S, opened, sqlite_uri
from gaplens.loaders.nsys.nvtx import NVTX, OPEN_END, read_nvtx
from gaplens.loaders.nsys.parts import Context, Interner, LaneKeys, Part
from gaplens.loaders.nsys.sql import NULL, Reader, Schema, read_meta, read_strings
from gaplens.loaders.text import shorten
from gaplens.loaders.trace import Trace
from gaplens.loaders.validate import Repairs, check_events, int_or_none

# Tables that only an nsys export has; one of them must be present.
_NSYS_TABLES = ("StringIds", RUNTIME, KERNEL, NVTX, "TARGET_INFO_GPU", "TARGET_INFO_SESSION_START_TIME", "ThreadNames")
_HOST_LANES = (LaneKind.CUDA_API, LaneKind.ANNOTATIONS, LaneKind.OSRT, LaneKind.OVERHEAD)


def load_nsys(path: str | os.PathLike, progress: Progress | None = None) -> Trace:
    """Open an nsys export read-only and build its Trace; bad input raises a one-line TraceError."""
    path = os.fspath(path)
    with opened(path, progress) as (db, immutable):
        reader = Reader(sqlite_uri(db, immutable))
        try:
            with heap.big_load():
                return _load(reader, path, progress)
        except sqlite3.Error as exc:
            raise TraceError(_sql_message(path, exc)) from None
        except UnicodeDecodeError as exc:
            # SQLite's own message quoted bytes of the file that are not UTF-8 ("malformed database
            # schema (...) near ..."), and Python failed to decode the message itself.
            raw = exc.object if isinstance(exc.object, bytes) else b""
            raise TraceError(_sql_message(path, sqlite3.DatabaseError(raw.decode("utf-8", "replace")))) from None
        finally:
            reader.close()


def _sql_message(path: str, exc: sqlite3.Error) -> str:
    """One line; SQLite's own text can quote the file's bytes, so it is sanitised and shortened."""
    text = shorten(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 160)
    if "not a database" in text:
        return f"{path}: not a readable SQLite database (corrupt, or not an nsys export)"
    if "malformed" in text:
        return f"{path}: corrupt SQLite file ({text})"
    if "locked" in text or "busy" in text:
        return f"{path}: the database is locked by another process (still being written?)"
    if "interrupted" in text:  # nsys_files.connect's deadline
        return f"{path}: a query ran past {QUERY_DEADLINE_S:.0f} s and was stopped (an export whose rows never end?)"
    if "unable to open" in text:
        return f"{path}: cannot open the database ({text})"
    return f"{path}: cannot read the nsys export ({text})"


def _load(reader: Reader, path: str, progress: Progress | None) -> Trace:
    con = reader.con()
    schema = Schema.probe(con)
    if not any(schema.has(t) for t in _NSYS_TABLES):
        raise TraceError(f"{path}: an SQLite database, but not an Nsight Systems export (no nsys tables)")
    kv = read_meta(con, schema)
    warnings: list[str] = []
    repairs = Repairs()
    ctx = Context(reader, schema, read_strings(con, schema, repairs), Interner(), Interner(""), warnings, repairs)

    got: dict[str, Part | None] = {}
    readers: dict[str, PartReader] = {
        "CUDA API": read_api(ctx),
        "kernels": read_kernels(ctx),
        "memcpy": read_memcpy(ctx),
        "memset": read_memset(ctx),
        "graphs": read_graphs(ctx, got),
        "sync": read_sync(ctx, got),
        "OS runtime": read_osrt(ctx),
        "profiler overhead": read_overhead(ctx),
    }
    _run_readers(reader, readers, got, progress)
    nvtx, nvtx_threads = read_nvtx(ctx)
    got["NVTX"] = nvtx
    parts = [_usable_rows(label, p, ctx.repairs) for label, p in got.items() if p is not None and len(p)]
    for table, n in reader.bad.items():
        ctx.repairs.add(f"non-integer or out-of-range values in {table} read as missing", n)
    parts = [p for p in parts if len(p)]
    if not parts:
        why = ctx.repairs.line()
        raise TraceError(
            f"{path}: the nsys export holds no events (no CUDA, NVTX or OS runtime rows)" + (f" ({why})" if why else "")
        )
    if progress is not None:
        progress("building", 0.9)
    counts = {label: len(part) if part is not None else 0 for label, part in got.items()}
    keys = LaneKeys()
    ev = _joined(parts, keys)
    del parts
    got.clear()
    keep = check_events(ev["start"], ev["end"], ctx.repairs, open_end=ev["end"] == OPEN_END)
    if not keep.all():
        ev = {k: v[keep] for k, v in ev.items()}
    del keep
    _close_open_ranges(ev, ctx)

    lanes, lane_of = keys.lanes(ev.pop("lane"))
    meta = _meta(path, kv, con, schema, counts, ev, lanes, nvtx_threads, warnings, ctx.repairs)
    # The builder drops each column once it is sorted into place: hand it the only references.
    cols = {
        "lane": lane_of,
        "start": ev.pop("start"),
        "end": ev.pop("end"),
        "name_id": ev.pop("name"),
        "kind": ev.pop("kind"),
        "corr": ev.pop("corr"),
        "bytes": ev.pop("nbytes"),
        "detail_id": ev.pop("detail"),
        "scope": ev.pop("scope"),
    }
    del ev, lane_of  # no trim here: inside heap.big_load() the builder reuses what the readers freed
    trace = build_columns(meta, lanes, ctx.names.values(), ctx.details.values(), cols, ctx.repairs)
    if progress is not None:
        progress("done", 1.0)
    return trace


def _run_readers(
    reader: Reader, readers: dict[str, PartReader], done: dict[str, Part | None], progress: Progress | None
) -> None:
    """Schedule every table's fetch, then build the Parts into ``done`` in order (later readers use earlier)."""
    pending = {}
    for label, gen in readers.items():
        try:
            table, exprs, where = next(gen)
        except StopIteration as stop:  # the table is absent
            done[label] = stop.value
            continue
        pending[label] = reader.submit(table, exprs, where)
    for i, (label, gen) in enumerate(readers.items()):
        if label not in pending:
            continue
        if progress is not None:
            progress(f"reading {label}", 0.8 * i / len(readers))
        try:
            gen.send(pending[label]())
        except StopIteration as stop:
            done[label] = stop.value
        else:
            raise RuntimeError(f"table reader {label} asked for a second query")


def _usable_rows(label: str, part: Part, repairs: Repairs) -> Part:
    """Rows with a usable start; a missing end is an open range for NVTX, a zero-length event elsewhere."""
    no_start = part.start == NULL
    if no_start.any():
        repairs.add(f"{label} rows without a usable start skipped", int(no_start.sum()))
        part = part.take(~no_start)
    if label != "NVTX":
        no_end = part.end == NULL
        if no_end.any():
            repairs.add(f"{label} rows without a usable end drawn with length 0", int(no_end.sum()))
            part.end[no_end] = part.start[no_end]
    return part


def _joined(parts: list[Part], keys: LaneKeys) -> dict[str, np.ndarray]:
    """The Parts' rows as one set of columns, lanes as raw lane numbers; each part's column is dropped once joined."""
    out = {"lane": np.concatenate([keys.codes(p) for p in parts])}
    for f in ("lane_kind", "start", "end", "name", "kind", "corr", "scope", "nbytes", "detail"):
        out[f] = np.concatenate([getattr(p, f) for p in parts])
        for p in parts:
            setattr(p, f, None)
    return out


def _close_open_ranges(ev: dict[str, np.ndarray], ctx: Context) -> None:
    """NVTX ranges with a NULL end run to the end of the trace."""
    start, end = ev["start"], ev["end"]
    open_ = end == OPEN_END
    if open_.any():
        closed = end[~open_]
        trace_end = max(int(start.max()), int(closed.max()) if closed.size else int(start.max()))
        end[open_] = trace_end
        ctx.repairs.add("NVTX ranges with no end drawn open until the end of the trace", int(open_.sum()))


def _meta(
    path: str,
    kv: dict[str, str],
    con: sqlite3.Connection,
    schema: Schema,
    got: dict[str, int],
    ev: dict[str, np.ndarray],
    lanes: list[Lane],
    nvtx_threads: dict[tuple[int, int], str],
    warnings: list[str],
    repairs: Repairs,
) -> Meta:
    product = kv.get("EXPORT_PRODUCT_VERSION", "?")
    version = kv.get("EXPORT_SCHEMA_VERSION", "?")
    meta = Meta(source_format="nsys", source_version=f"nsys {product} (export schema {version})", path=path)
    meta.extra = {
        "export": {k: v for k, v in kv.items() if k.startswith(("EXPORT_PARAM_", "EXPORT_PRODUCT", "EXPORT_SCHEMA"))},
    }
    normalized = kv.get("EXPORT_PARAM_TIME_NORMALIZE", "false").strip().lower() == "true"
    meta.extra["time_base"] = "utc_epoch" if normalized else "session_start"
    shift = int_or_none(kv.get("EXPORT_PARAM_TIME_SHIFT", "0") or 0, floats=False)
    if shift is None:
        warnings.append("EXPORT_PARAM_TIME_SHIFT is not an integer: taken as 0")
    meta.extra["time_shift_ns"] = shift or 0
    if not normalized and schema.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        epoch = None if not row or isinstance(row[0], bool) else int_or_none(row[0], floats=False)
        if row and row[0] is not None and epoch is None:
            repairs.note("utcEpochNs is not an integer: wall-clock times unknown")
        if epoch is not None:
            # Wall clock of a stored time t: utc_epoch_ns + t - time_shift_ns.
            meta.extra["utc_epoch_ns"] = epoch
    if kv.get("EXPORT_PARAM_TABLES_TO_EXPORT") or kv.get("EXPORT_PARAM_TIMES_TO_EXPORT"):
        warnings.append("filtered export (--tables/--times): some launches or GPU work may be missing their partners")

    gpu_rows = sum(got.get(k, 0) for k in ("kernels", "memcpy", "memset", "graphs"))
    if gpu_rows == 0:
        meta.lacks.append("gpu")
        missing = [t for t in GPU_TABLES[:3] if not schema.has(t)]
        if missing:
            warnings.append(
                f"no GPU activity: the export lacks {', '.join(missing)} (nsys {product}, schema {version});"
                " re-export the report with a newer nsys or capture with --trace=cuda"
            )
        else:
            warnings.append("no GPU activity: the CUDA activity tables are empty")
    if not got.get("CUDA API", 0):
        meta.lacks.append("cuda_api")
        if not schema.has(RUNTIME):
            warnings.append(f"no CUDA API calls: the export lacks {RUNTIME} (CPU-only capture?)")
    host = sum(got.get(k, 0) for k in ("CUDA API", "NVTX", "OS runtime"))
    if host == 0:
        meta.lacks.append("cpu")
    if "gpu" in meta.lacks and "cuda_api" in meta.lacks:
        warnings.append("CPU-only capture: no CUDA tables, only host-side rows are shown")

    meta.devices = _devices(con, schema, lanes, repairs)
    pids = {ln.pid for ln in lanes if ln.kind in _HOST_LANES}
    gpu = np.isin(ev["lane_kind"], [int(LaneKind.STREAM), int(LaneKind.GPU_SYNC)])
    pids |= {int(p) for p in np.unique((ev["scope"][gpu] >> 24) & 0xFFFFFF).tolist() if p}
    meta.processes = _process_names(con, schema, pids)
    meta.threads = _thread_names(con, schema, {(ln.pid, ln.tid) for ln in lanes if ln.kind in _HOST_LANES})
    for key, name in nvtx_threads.items():
        meta.threads.setdefault(key, name)
    streams = _streams(con, schema)
    if streams:
        meta.extra["streams"] = streams
    meta.warnings = warnings
    return meta


def _devices(con: sqlite3.Connection, schema: Schema, lanes: list[Lane], repairs: Repairs) -> list[Device]:
    """GPUs that own events; TARGET_INFO_GPU also lists idle GPUs of the node."""
    used = sorted({ln.device for ln in lanes if ln.is_gpu})
    info: dict[int, dict] = {}
    if schema.has("TARGET_INFO_GPU", "id"):
        cols = [c for c in schema.columns["TARGET_INFO_GPU"] if c not in ("ctxswDevPath", "ctrlDevPath")]
        for row in con.execute("SELECT " + ", ".join(f'"{c}"' for c in cols) + " FROM TARGET_INFO_GPU"):
            rec = dict(zip(cols, row, strict=True))
            gpu = None if isinstance(rec.get("id"), bool) else int_or_none(rec.get("id"), floats=False)
            if gpu is None:
                repairs.add("TARGET_INFO_GPU rows with an id that is not an integer ignored")
            else:
                info.setdefault(gpu, {k: v for k, v in rec.items() if isinstance(v, int | float | str)})
    return [Device(d, str(info.get(d, {}).get("name") or f"GPU {d}"), info.get(d, {})) for d in used]


def _process_names(con: sqlite3.Connection, schema: Schema, pids: set[int]) -> dict[int, str]:
    out: dict[int, str] = {}
    if schema.has("PROCESSES", "globalPid") and pids:
        for gpid, name in con.execute("SELECT globalPid, name FROM PROCESSES"):
            gpid = int_or_none(gpid, floats=False) if not isinstance(gpid, bool) else None
            if gpid is None:
                continue
            pid = (gpid >> 24) & 0xFFFFFF
            if pid in pids and name:
                out.setdefault(pid, str(name))
    return out


def _thread_names(con: sqlite3.Connection, schema: Schema, threads: set[tuple[int, int]]) -> dict[tuple[int, int], str]:
    out: dict[tuple[int, int], str] = {}
    if schema.has("ThreadNames", "globalTid") and schema.has("StringIds") and threads:
        sql = "SELECT t.globalTid, s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId"
        for gtid, name in con.execute(sql):
            gtid = int_or_none(gtid, floats=False) if not isinstance(gtid, bool) else None
            if gtid is None or not name:
                continue
            key = ((gtid >> 24) & 0xFFFFFF, gtid & 0xFFFFFF)
            if key in threads:
                out.setdefault(key, str(name))
    return out


def _streams(con: sqlite3.Connection, schema: Schema) -> list[dict]:
    """Stream priorities (stored unsigned) and types, for the details of stream lanes."""
    t = "TARGET_INFO_CUDA_STREAM"
    if not schema.has(t, "streamId"):
        return []
    out = []
    extra = ", ".join(schema.col(t, c) for c in ("priority", "flag", "processId"))
    sql = f"SELECT streamId, {extra} FROM {t}"
    for sid, prio, flag, pid in con.execute(sql):
        prio = int_or_none(prio, floats=False) if not isinstance(prio, bool) else None
        if prio is not None and (1 << 31) <= prio < (1 << 32):
            prio -= 1 << 32
        out.append({"stream": sid, "priority": prio, "flag": flag, "pid": pid})
        if len(out) >= 10_000:  # a fact for the details panel, not a table to copy whole
            break
    return out
