"""CUDA tables of an nsys export as Parts: API calls, kernels, memcpy, memset, sync, graphs, OS runtime.

Every table is read by column name after probing (columns move between versions),
fetched in bulk, and turned into names/details once per distinct value, never per row.
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np

from gaplens.loaders.kinds import Kind, LaneKind
from gaplens.loaders.nsys.parts import (
    TID_MASK,
    Context,
    Part,
    api_display_name,
    factorize,
    first_index,
    process_scope,
    split_tid,
)
from gaplens.loaders.nsys.sql import NULL, Columns, Drop, Int, Where, read_enum
from gaplens.loaders.syncs import sync_detail
from gaplens.loaders.validate import MAX_BYTES, TIME_LIMIT_NS

#: A table reader: yields one (table, {key: integer column}, where) request, is sent the
#: fetched int64 columns, and returns its Part. Requests of all tables are scheduled
#: before any result is awaited, so both cores fetch even when every table is small.
PartReader = Generator[tuple[str, dict[str, Int], Where], dict[str, np.ndarray], "Part | None"]

# Ranges of the guarded columns: what the packings below and the lane keys can hold.
ID31 = (1 << 31) - 1  # StringIds ids (two are packed into one integer)
CORR = (1 << 39) - 1  # correlation ids (keyed with 24 process bits)
DEVICE = (1 << 24) - 2  # lane keys keep 24 bits of device
STREAM = 1 << 32

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
CUDA_EVENT = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"  # event records: which stream, which call
GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
OSRT = "OSRT_API"
OVERHEAD = "PROFILER_OVERHEAD"
GPU_TABLES = (KERNEL, MEMCPY, MEMSET, GRAPH)
BACKTRACE_CLASS = 67  # 2022.x: a second copy of every API call carrying its backtrace
NO_STREAM = 4294967295  # sentinel for "not applicable" in sync rows

# copyKind → (event kind, short label as Kineto writes it)
_COPY = {
    1: (Kind.MEMCPY_HTOD, "HtoD"),
    2: (Kind.MEMCPY_DTOH, "DtoH"),
    3: (Kind.MEMCPY_OTHER, "HtoA"),
    4: (Kind.MEMCPY_OTHER, "AtoH"),
    5: (Kind.MEMCPY_OTHER, "AtoA"),
    6: (Kind.MEMCPY_OTHER, "AtoD"),
    7: (Kind.MEMCPY_OTHER, "DtoA"),
    8: (Kind.MEMCPY_DTOD, "DtoD"),
    9: (Kind.MEMCPY_OTHER, "HtoH"),
    10: (Kind.MEMCPY_PEER, "PtoP"),
    11: (Kind.MEMCPY_HTOD, "HtoD"),
    12: (Kind.MEMCPY_DTOH, "DtoH"),
    13: (Kind.MEMCPY_DTOD, "DtoD"),
}
_WAIT_LABEL = "Stream wait event"
# The blocking call names the sync better than syncType, whose stored values drift between versions.
_SYNC_BY_API = (
    ("StreamWaitEvent", _WAIT_LABEL),
    ("StreamSynchronize", "Stream sync"),
    ("StreamQuery", "Stream query"),
    ("EventSynchronize", "Event sync"),
    ("EventQuery", "Event query"),
    ("DeviceSynchronize", "Device sync"),
    ("CtxSynchronize", "Context sync"),
    ("Memcpy", "Memcpy sync"),
    ("Memset", "Memset sync"),
)


def _time(c: Columns) -> dict[str, Int]:
    return {"start": c.int("start", lo=-TIME_LIMIT_NS, hi=TIME_LIMIT_NS), "end": c.int("end")}


def _gpu_exprs(c: Columns) -> dict[str, Int]:
    return _time(c) | {
        "dev": c.int("deviceId", lo=0, hi=DEVICE),
        "stream": c.int("streamId", lo=0, hi=STREAM),
        "corr": c.int("correlationId", lo=0, hi=CORR),
        "pid": c.int("globalPid"),
    }


def _request(c: Columns, exprs: dict[str, Int], where: Where = "") -> tuple[str, dict[str, Int], Where]:
    return c.table, exprs, where


def _z(col: np.ndarray) -> np.ndarray:
    """NULL read as 0."""
    return np.where(col == NULL, 0, col)


def _nulls_to_0(col: np.ndarray) -> np.ndarray:
    """NULL read as 0, in place, for a column read with a range starting at 0 (NULL is below every value)."""
    return np.maximum(col, 0, out=col)


def _unpack_lane(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    _nulls_to_0(cols["dev"])
    _nulls_to_0(cols["stream"])
    return cols


def _corr(cols: dict[str, np.ndarray]) -> np.ndarray:
    """Correlation ids with NULL read as -1, in place (their range starts at 0)."""
    return np.maximum(cols["corr"], -1, out=cols["corr"])


def _scope(cols: dict[str, np.ndarray]) -> np.ndarray:
    """The process bits of ``globalPid``, NULL read as process 0, in place."""
    pid = cols["pid"]
    np.putmask(pid, pid == NULL, 0)
    pid &= ~np.int64(TID_MASK)
    return pid


def read_api(ctx: Context) -> PartReader:
    """Runtime and driver calls (one table, told apart by eventClass), backtrace duplicates dropped."""
    c = Columns(ctx.schema, RUNTIME)
    if not _usable(ctx, c):
        return None
    where: Where = Drop("eventClass", BACKTRACE_CLASS) if c.has("eventClass") else ""
    exprs = _time(c) | {
        "tid": c.int("globalTid"),
        "corr": c.int("correlationId", lo=0, hi=CORR),
        "name": c.int("nameId", lo=0, hi=ID31),
    }
    cols = yield _request(c, exprs, where)
    gtid = cols["tid"]
    np.putmask(gtid, gtid == NULL, 0)
    pid, tid = split_tid(gtid)
    gtid &= ~np.int64(TID_MASK)  # now the process scope
    inverse, ids = factorize(cols["name"])  # one factorization for both lookups
    name = ctx.names.lut(ids, lambda s: api_display_name(ctx.string(s)), "CUDA API")[inverse]
    raw = ctx.details.lut(ids, lambda s: _raw_if_suffixed(ctx.string(s)), "?")[inverse]
    return Part.make(
        LaneKind.CUDA_API,
        pid,
        tid,
        cols["start"],
        cols["end"],
        name,
        Kind.CUDA_API,
        _corr(cols),
        gtid,
        detail=raw,
    )


def _raw_if_suffixed(raw: str) -> str:
    return raw if api_display_name(raw) != raw else ""


def read_kernels(ctx: Context) -> PartReader:
    c = Columns(ctx.schema, KERNEL)
    if not _usable(ctx, c):
        return None
    g16, b11 = {"lo": 0, "hi": 65535}, {"lo": 0, "hi": 2047}
    exprs = _gpu_exprs(c) | {
        "short": c.int("shortName", "demangledName", lo=0, hi=ID31),
        "dem": c.int("demangledName", "shortName", lo=0, hi=ID31),
        "gx": c.int("gridX", lo=0, hi=ID31),
        "gy": c.int("gridY", **g16),
        "gz": c.int("gridZ", **g16),
        "bx": c.int("blockX", **b11),
        "by": c.int("blockY", **b11),
        "bz": c.int("blockZ", **b11),
        "regs": c.int("registersPerThread", lo=0, hi=1023),
        "ss": c.int("staticSharedMemory", lo=0, hi=1 << 38),
        "ds": c.int("dynamicSharedMemory", lo=0, hi=(1 << 24) - 1),
    }
    cols = _unpack_lane((yield _request(c, exprs)))
    short, dem = cols.pop("short"), cols["dem"]
    gap = short == NULL
    short[gap] = dem[gap]
    gap = dem == NULL
    if gap.any():
        dem[gap] = np.where(short[gap] == NULL, -1, short[gap])
    np.maximum(short, -1, out=short)  # NULL read as -1 (ids start at 0)
    del gap
    name = ctx.names.map_ids(short, ctx.string, "kernel")
    del short
    # Launch geometry packed into three exact integers (the ranges above keep them apart),
    # unpacked once per distinct value; each is built in place of its first column.
    cols["grid"] = _packed(cols, ("gx", 32), ("gy", 16), ("gz", 0))
    cols["block"] = _packed(cols, ("bx", 32), ("by", 21), ("bz", 10), ("regs", 0))
    cols["smem"] = _packed(cols, ("ss", 24), ("ds", 0))
    detail = _kernel_details(ctx, cols)
    return Part.make(
        LaneKind.STREAM,
        cols["dev"],
        cols["stream"],
        cols["start"],
        cols["end"],
        name,
        Kind.KERNEL,
        _corr(cols),
        _scope(cols),
        detail=detail,
    )


def _packed(cols: dict[str, np.ndarray], *fields: tuple[str, int]) -> np.ndarray:
    """The columns, NULL read as 0, each shifted left by its bits and OR-ed together; they are used up."""
    (first, shift), *rest = fields
    out = _nulls_to_0(cols.pop(first))
    out <<= shift
    for key, bits in rest:
        col = _nulls_to_0(cols.pop(key))
        if bits:
            col <<= bits
        out |= col
    return out


def _kernel_details(ctx: Context, cols: dict[str, np.ndarray]) -> np.ndarray:
    """One details string per distinct (demangled name, grid, block, regs, smem)."""
    keys = [cols.pop("dem"), cols.pop("grid"), cols.pop("block"), cols.pop("smem")]
    n = keys[0].size
    if n == 0:
        return np.empty(0, np.int32)
    # A hash of the four columns, computed column by column in place of one (n, 4) copy.
    h = np.multiply(keys[0].view(np.uint64), np.uint64(0x9E3779B97F4A7C15))
    tmp = np.empty(n, np.uint64)
    for col, mult in zip(keys[1:], (0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5), strict=True):
        np.right_shift(h, np.uint64(29), out=tmp)
        h ^= tmp
        np.multiply(col.view(np.uint64), np.uint64(mult), out=tmp)
        h += tmp
    inverse, uniq = factorize(h.view(np.int64))
    del h
    first = first_index(inverse, uniq.size)
    same = tmp.view(np.int64)
    for col in keys:  # every row equals its group's first row, or a hash collision: exact but slower
        np.take(col[first], inverse, out=same)
        if not np.array_equal(same, col):
            stacked = np.stack(keys, axis=1)
            _, first, inverse = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
            inverse = inverse.reshape(-1)
            break
    del tmp, same
    lut = np.empty(first.size, np.int32)
    rows = zip(*(col[first].tolist() for col in keys), strict=True)
    for j, (dem, grid, block, smem) in enumerate(rows):
        gx, gy, gz = grid >> 32, (grid >> 16) & 0xFFFF, grid & 0xFFFF
        regs, bz, by, bx = block & 1023, (block >> 10) & 2047, (block >> 21) & 2047, block >> 32
        lut[j] = ctx.details.add(
            f"grid {gx}×{gy}×{gz}  block {bx}×{by}×{bz}  regs {regs}  "
            f"smem {smem >> 24}+{smem & 0xFFFFFF} B  ·  {ctx.string(dem)}"
        )
    return lut[inverse]


def read_memcpy(ctx: Context) -> PartReader:
    c = Columns(ctx.schema, MEMCPY)
    if not _usable(ctx, c):
        return None
    sc = ctx.schema
    extra = {
        "bytes": c.int("bytes", lo=0, hi=MAX_BYTES),
        "copy": c.int("copyKind", lo=0, hi=255),
        "src": c.int("srcKind", lo=0, hi=254),
        "dst": c.int("dstKind", lo=0, hi=254),
    }
    cols = _unpack_lane((yield _request(c, _gpu_exprs(c) | extra)))
    cols["bytes"], cols["copy"] = _z(cols["bytes"]), _z(cols["copy"])
    opers = read_enum(ctx.reader.con(), sc, "ENUM_CUDA_MEMCPY_OPER")
    mems = read_enum(ctx.reader.con(), sc, "ENUM_CUDA_MEM_KIND")
    src = np.where(cols["src"] == NULL, 255, cols["src"] & 255)
    dst = np.where(cols["dst"] == NULL, 255, cols["dst"] & 255)
    combo = (np.clip(cols["copy"], 0, 255) << 16) | (src << 8) | dst
    codes, inverse = np.unique(combo, return_inverse=True)
    name_lut = np.empty(codes.size, np.int32)
    detail_lut = np.empty(codes.size, np.int32)
    kind_lut = np.empty(codes.size, np.int8)
    for j, c in enumerate(codes.tolist()):
        copy, s, d = c >> 16, (c >> 8) & 255, c & 255
        kind, short = _COPY.get(copy, (Kind.MEMCPY_OTHER, "other"))
        src_label, dst_label = mems.get(s, "?") if s != 255 else "?", mems.get(d, "?") if d != 255 else "?"
        kind_lut[j] = int(kind)
        name_lut[j] = ctx.names.add(f"Memcpy {short} ({src_label} -> {dst_label})")
        detail_lut[j] = ctx.details.add(f"{opers.get(copy, f'copyKind {copy}')}  from {src_label} to {dst_label}")
    inverse = inverse.reshape(-1)
    return Part.make(
        LaneKind.STREAM,
        cols["dev"],
        cols["stream"],
        cols["start"],
        cols["end"],
        name_lut[inverse],
        kind_lut[inverse],
        _corr(cols),
        _scope(cols),
        cols["bytes"],
        detail_lut[inverse],
    )


def read_memset(ctx: Context) -> PartReader:
    c = Columns(ctx.schema, MEMSET)
    if not _usable(ctx, c):
        return None
    extra = {"bytes": c.int("bytes", lo=0, hi=MAX_BYTES), "mem": c.int("memKind", lo=0, hi=255)}
    cols = _unpack_lane((yield _request(c, _gpu_exprs(c) | extra)))
    cols["bytes"] = _z(cols["bytes"])
    mems = read_enum(ctx.reader.con(), ctx.schema, "ENUM_CUDA_MEM_KIND")
    name = ctx.names.map_ids(cols["mem"], lambda m: f"Memset ({mems.get(m, 'Unknown')})" if m != NULL else "Memset")
    return Part.make(
        LaneKind.STREAM,
        cols["dev"],
        cols["stream"],
        cols["start"],
        cols["end"],
        name,
        Kind.MEMSET,
        _corr(cols),
        _scope(cols),
        cols["bytes"],
    )


def read_graphs(ctx: Context, built: dict[str, Part | None]) -> PartReader:
    """Whole-graph boxes (graph-level tracing); dropped where the graph's nodes were traced too."""
    c = Columns(ctx.schema, GRAPH)
    if not _usable(ctx, c):
        return None
    cols = _unpack_lane((yield _request(c, _gpu_exprs(c) | {"graph": c.int("graphId")})))
    corr, scope = _corr(cols), _scope(cols)
    keep = np.ones(corr.size, bool)
    kernels = built.get("kernels")
    if kernels is not None and len(kernels):
        keep = ~np.isin(_key(scope, corr), _key(kernels.scope, kernels.corr))
    name = ctx.names.map_ids(cols["graph"], lambda g: f"CUDA graph {g}" if g != NULL else "CUDA graph")
    part = Part.make(
        LaneKind.STREAM,
        cols["dev"],
        cols["stream"],
        cols["start"],
        cols["end"],
        name,
        Kind.GRAPH,
        corr,
        scope,
    )
    return _take(part, keep)


def read_sync(ctx: Context, built: dict[str, Part | None]) -> PartReader:
    """GPU-side sync records on the device's sync lane, named after the API call that blocked."""
    c = Columns(ctx.schema, SYNC)
    if not _usable(ctx, c):
        return None
    sc = ctx.schema
    extra = {
        "hint": c.int("syncType", lo=0, hi=ID31),
        "old": c.int("deprecatedSyncType", lo=0, hi=ID31),
        "event": c.int("eventId"),
    }
    cols = _unpack_lane((yield _request(c, _gpu_exprs(c) | extra)))
    hint = np.where((cols["hint"] == NULL) | (cols["hint"] == 0), cols["old"], cols["hint"])
    hint = np.where(hint == NULL, 0, np.clip(hint, 0, 15))
    corr, scope = _corr(cols), _scope(cols)
    api_name = _api_name_of(built.get("CUDA API"), scope, corr)
    stream = np.where(cols["stream"] == NO_STREAM, -1, cols["stream"])
    labels = read_enum(ctx.reader.con(), sc, "ENUM_CUPTI_SYNC_TYPE")
    combo = ((api_name + 1) << 40) | (hint << 36) | (stream & ((1 << 36) - 1))
    codes, inverse = np.unique(combo, return_inverse=True)
    inverse = inverse.reshape(-1)
    names = ctx.names.values()
    name_lut = np.empty(codes.size, np.int32)
    detail_lut = np.empty(codes.size, np.int32)
    texts: list[tuple[str, str]] = []  # per code: (label, " by <call>  syncType <h>" tail)
    for j, c in enumerate(codes.tolist()):
        a, h, s = (c >> 40) - 1, (c >> 36) & 15, c & ((1 << 36) - 1)
        call = names[a] if a >= 0 else ""
        label = next((lab for key, lab in _SYNC_BY_API if key in call), labels.get(h, "Sync"))
        name_lut[j] = ctx.names.add(label)
        tail = f"by {call or 'unknown call'}  syncType {labels.get(h, h)}"
        texts.append((label, tail))
        s = -1 if s == (1 << 36) - 1 else s
        detail_lut[j] = ctx.details.add(_sync_text(label, s, -1, -1, tail))
    detail = detail_lut[inverse]
    # Stream waits name the stream and call that recorded the awaited event (CUDA_EVENT rows).
    waits = np.flatnonzero(name_lut[inverse] == ctx.names.ids.get(_WAIT_LABEL, -2))
    if waits.size and ctx.schema.has(CUDA_EVENT):
        on_stream, record = _event_records(ctx, scope[waits], cols["event"][waits], corr[waits])
        keys = np.stack([inverse[waits], stream[waits], on_stream, record], axis=1)
        uniq, back = np.unique(keys, axis=0, return_inverse=True)
        lut = np.fromiter(
            (ctx.details.add(_sync_text(texts[j][0], s, on, rec, texts[j][1])) for j, s, on, rec in uniq.tolist()),
            np.int32,
            uniq.shape[0],
        )
        detail[waits] = lut[back.reshape(-1)]
    return Part.make(
        LaneKind.GPU_SYNC,
        cols["dev"],
        -1,
        cols["start"],
        cols["end"],
        name_lut[inverse],
        Kind.SYNC,
        corr,
        scope,
        detail=detail,
    )


def _sync_text(label: str, stream: int, on_stream: int, record_corr: int, tail: str) -> str:
    """The shared sync detail (``loaders.syncs``), then how nsys learned it."""
    where = "" if stream >= 0 or on_stream >= 0 else "device-wide"
    return "  ".join(p for p in (sync_detail(label, stream, on_stream, record_corr), where, tail) if p)


def _event_records(
    ctx: Context, scope: np.ndarray, event: np.ndarray, corr: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per stream wait: (stream, correlation id) of the event record it waited on, -1 when unknown.

    That is the latest record of the same event in the same process issued before the wait
    call (correlation ids grow with call order): later records cannot satisfy this wait.
    """
    on_stream = np.full(corr.size, -1, np.int64)
    record = np.full(corr.size, -1, np.int64)
    sc = ctx.schema
    c = Columns(sc, CUDA_EVENT)
    exprs = {
        "pid": c.int("globalPid"),
        "event": c.int("eventId"),
        "stream": c.int("streamId", lo=0, hi=STREAM),
        "corr": c.int("correlationId", lo=0, hi=CORR),
    }
    rec = ctx.reader.ints(CUDA_EVENT, exprs)
    ok = (rec["event"] != NULL) & (rec["corr"] != NULL) & (rec["stream"] != NULL)
    if not ok.any():
        return on_stream, record
    r_pid = (process_scope(np.where(rec["pid"] == NULL, 0, rec["pid"])[ok]) >> 24) & 0xFFFFFF
    r_event, r_stream, r_corr = rec["event"][ok] & 0xFFFFFFFF, rec["stream"][ok], rec["corr"][ok]
    q_pid = (scope >> 24) & 0xFFFFFF
    # (process, event) pairs as dense codes, then one sortable key per (pair, correlation).
    pair_codes, _ = factorize(np.concatenate(((r_pid << 32) | r_event, (q_pid << 32) | (event & 0xFFFFFFFF))))
    span = int(max(int(r_corr.max()), int(corr.max()))) + 2
    r_key = pair_codes[: r_corr.size] * span + r_corr
    q_key = pair_codes[r_corr.size :] * span + np.maximum(corr, 0)
    order = np.argsort(r_key, kind="stable")
    r_key = r_key[order]
    k = np.searchsorted(r_key, q_key, "left") - 1  # strictly before the wait call
    hit = (k >= 0) & (event != NULL) & (corr >= 0)
    hit &= (r_key[np.maximum(k, 0)] // span) == pair_codes[r_corr.size :]
    on_stream[hit] = r_stream[order][k[hit]]
    record[hit] = r_corr[order][k[hit]]
    return on_stream, record


def read_osrt(ctx: Context) -> PartReader:
    return _thread_rows(ctx, OSRT, LaneKind.OSRT, Kind.OSRT, "OS runtime call")


def read_overhead(ctx: Context) -> PartReader:
    """The profiler's own work (CUPTI buffer flushes, initialisation): a lane of its own per thread."""
    return _thread_rows(ctx, OVERHEAD, LaneKind.OVERHEAD, Kind.OVERHEAD, "profiler overhead")


def _thread_rows(ctx: Context, table: str, lane: LaneKind, kind: Kind, unnamed: str) -> PartReader:
    """A table of named (start, end, globalTid) rows: one lane of ``lane`` kind per thread."""
    c = Columns(ctx.schema, table)
    if not _usable(ctx, c):
        return None
    exprs = _time(c) | {"tid": c.int("globalTid"), "name": c.int("nameId", lo=0, hi=ID31)}
    cols = yield _request(c, exprs)
    cols["tid"] = _z(cols["tid"])
    pid, tid = split_tid(cols["tid"])
    name = ctx.names.map_ids(cols["name"], ctx.string, unnamed)
    return Part.make(lane, pid, tid, cols["start"], cols["end"], name, kind)


def _usable(ctx: Context, c: Columns) -> bool:
    """The table is present and has its time columns; a renamed ``start`` must not read as 0."""
    if not ctx.schema.has(c.table):
        return False
    missing = [col for col in ("start", "end") if not c.has(col)]
    if missing:
        ctx.repairs.note(f"{c.table} lacks its {' and '.join(missing)} column: its rows are not shown")
        return False
    return True


def _key(scope: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """One int64 per (process, correlation id): pid bits are 24 wide, ids fit 39 bits in practice."""
    pid = (scope >> 24) & 0xFFFFFF
    return (pid << 39) | (corr & ((1 << 39) - 1))


def _api_name_of(api: Part | None, scope: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """Name id of the API call with the same (process, correlation), -1 when none."""
    out = np.full(corr.size, -1, np.int64)
    if api is None or not len(api) or not corr.size:
        return out
    a_key = _key(api.scope, api.corr)
    order = np.argsort(a_key, kind="stable")
    a_key = a_key[order]
    k = _key(scope, corr)
    pos = np.minimum(np.searchsorted(a_key, k), a_key.size - 1)
    hit = (a_key[pos] == k) & (corr >= 0)
    out[hit] = api.name[order][pos[hit]]
    return out


def _take(part: Part, keep: np.ndarray) -> Part:
    return Part(**{f: getattr(part, f)[keep] for f in Part.__dataclass_fields__})
