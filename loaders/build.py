"""Building a Trace from a loader's columns: the typed boundary, the (lane, depth, start) order, the row
index and the launch links. Loaders hand absolute ns; the Trace holds times relative to its first event."""

from __future__ import annotations

import dataclasses

import numpy as np

from gaplens.loaders.kinds import GPU_WORK_KINDS, Kind
from gaplens.loaders.meta import Lane, Meta
from gaplens.loaders.rows import pack_depths, segmented_max
from gaplens.loaders.trace import Trace
from gaplens.loaders.validate import Repairs, check_columns, check_events, clean_meta, clean_texts


def build_trace(
    meta: Meta,
    lanes: list[Lane],
    names: list[str],
    details: list[str],
    lane: np.ndarray,
    start_ns: np.ndarray,
    end_ns: np.ndarray,
    name_id: np.ndarray,
    kind: np.ndarray,
    corr: np.ndarray,
    nbytes: np.ndarray,
    detail_id: np.ndarray,
    corr_scope: np.ndarray | None = None,
    repairs: Repairs | None = None,
) -> Trace:
    """Sort, pack depths, index rows and link launches; times are absolute ns on input.

    ``corr_scope`` keys correlation ids (nsys: the process; Kineto: one scope per
    file) because ids repeat across processes. The arrays are the builder's to reuse
    (``end_ns`` is clamped in place); ``build_columns`` takes them in a dict it empties,
    which lets each go as soon as it has been sorted.
    """
    cols = {
        "lane": lane,
        "start": start_ns,
        "end": end_ns,
        "name_id": name_id,
        "kind": kind,
        "corr": corr,
        "bytes": nbytes,
        "detail_id": detail_id,
        "scope": corr_scope,
    }
    del lane, start_ns, end_ns, name_id, kind, corr, nbytes, detail_id, corr_scope
    return build_columns(meta, lanes, names, details, cols, repairs)


def _event_order(lane: np.ndarray, start: np.ndarray, end: np.ndarray, origin: int) -> np.ndarray:
    """Indices in (lane, start, -duration) order: parents before the children they start with.

    One stable sort of a (lane, start) key does most of it (readers hand events in
    runs already in time order, which a merge sort takes in its stride); only the
    rows that tie on (lane, start) are then ordered by duration.
    """
    n = start.size
    if n == 0:
        return np.empty(0, np.int64)
    span = int(start.max()) - origin
    if int(lane.max()) >= 1 << 15 or int(lane.min()) < 0 or span >= 1 << 47:
        return np.lexsort((start - end, start, lane))
    key = lane.astype(np.int64)
    key <<= 47
    key += start
    key -= origin
    order = np.argsort(key, kind="stable")
    key = key[order]
    tie = key[1:] == key[:-1]
    if tie.any():
        # Runs of equal keys: longest first within each run.
        in_run = np.zeros(n, bool)
        in_run[1:] |= tie
        in_run[:-1] |= tie
        pos = np.flatnonzero(in_run)
        run = np.cumsum(~np.concatenate(([False], tie)))[pos]
        sub = order[pos]
        order[pos] = sub[np.lexsort((start[sub] - end[sub], run))]
    return order


_DTYPES = {"name_id": np.int32, "kind": np.int8, "corr": np.int64, "bytes": np.int64, "detail_id": np.int32}


def build_columns(
    meta: Meta, lanes: list[Lane], names: list[str], details: list[str], cols: dict, repairs: Repairs | None = None
) -> Trace:
    """``build_trace`` on a dict of columns (keys as in ``build_trace``'s body), emptied as it goes.

    Every column passes the typed boundary (``loaders.validate``) first; what it skips or
    clamps joins ``repairs``, which becomes one warning line, and the metadata is sanitised.
    A load's peak memory is here: the order is found on three columns, then every
    column is gathered once into its final place and its input dropped, so the peak
    holds the inputs, one order and a few temporaries rather than several copies.
    """
    lanes, names, details = _checked(meta, lanes, names, details, cols, Repairs() if repairs is None else repairs)
    start = cols["start"]
    meta.origin_ns = int(start.min()) if start.size else 0
    del start
    out = _in_row_order(cols, meta.origin_ns)
    row_lane, row_depth, row_offsets, row_maxend = _row_index(out["lane"], out["depth"], out["end_ns"])
    launch = link_launches(out["kind"], out["corr"], out.pop("scope", None))
    return Trace(
        meta=meta,
        lanes=lanes,
        names=names,
        details=details,
        lane=out["lane"],
        depth=out["depth"],
        start_ns=out["start_ns"],
        end_ns=out["end_ns"],
        name_id=out["name_id"],
        kind=out["kind"],
        corr=out["corr"],
        bytes=out["bytes"],
        detail_id=out["detail_id"],
        launch=launch,
        row_lane=row_lane,
        row_depth=row_depth,
        row_offsets=row_offsets,
        row_maxend=row_maxend,
    )


def _checked(
    meta: Meta, lanes: list[Lane], names: list[str], details: list[str], cols: dict, repairs: Repairs
) -> tuple[list[Lane], list[str], list[str]]:
    """The typed boundary over every column, in ``cols`` (start and end become int64, end writable): events
    skipped, ends clamped, lanes left empty dropped; returns the lanes, names and details kept, cleaned."""
    start = np.asarray(cols.pop("start"), dtype=np.int64)
    end = np.array(cols.pop("end"), dtype=np.int64, copy=None)
    if not end.flags.writeable:
        end = end.copy()
    keep = check_events(start, end, repairs)  # clamps end in place
    if not keep.all():
        start, end = start[keep], end[keep]
        for key in ("lane", *_DTYPES, "scope"):
            if cols.get(key) is not None:
                cols[key] = np.asarray(cols[key])[keep]
    del keep
    cols["start"], cols["end"] = start, end
    del start, end
    lanes, cols["lane"] = _used_lanes(lanes, np.asarray(cols["lane"], dtype=np.int32))
    cols["bytes"] = _writable(cols["bytes"])
    cols["corr"] = _writable(cols["corr"])
    check_columns(cols["bytes"], cols["corr"], repairs)
    names, details = clean_texts(names, repairs), clean_texts(details, repairs)
    if repairs:
        meta.warnings.append(repairs.line())
    clean_meta(meta)
    return lanes, names, details


def _in_row_order(cols: dict, origin: int) -> dict[str, np.ndarray]:
    """Every column of ``cols`` (emptied) gathered once into (lane, depth, start) order, times made
    relative to ``origin``; with ``depth``, and ``scope`` when there was one."""
    lane = cols.pop("lane")
    start = cols.pop("start")
    end = cols.pop("end")
    order = _event_order(lane, start, end, origin)
    lane_s = lane[order]
    del lane
    start_s = start[order]
    del start
    end_s = end[order]
    del end
    depth = pack_depths(lane_s, start_s, end_s)
    if depth.any():
        # Final order (lane, depth, start): each row contiguous and sorted. One gather per column.
        key = lane_s.astype(np.int64)
        key <<= 16
        key += depth
        order2 = np.argsort(key, kind="stable")
        del key
        final = order[order2]
        del order
        lane = lane_s[order2]
        del lane_s
        depth = depth[order2]
        start_ns = start_s[order2]
        del start_s
        end_ns = end_s[order2]
        del end_s, order2
    else:  # nothing overlaps: (lane, start) order is already (lane, depth, start) order
        final, lane, start_ns, end_ns = order, lane_s, start_s, end_s
        del order, lane_s, start_s, end_s
    start_ns -= origin
    end_ns -= origin
    out = {"lane": lane, "depth": depth, "start_ns": start_ns, "end_ns": end_ns}
    del lane, depth, start_ns, end_ns
    for name, dtype in _DTYPES.items():
        out[name] = np.asarray(cols.pop(name), dtype=dtype)[final]
    scope = cols.pop("scope")
    if scope is not None:
        out["scope"] = np.asarray(scope, dtype=np.int64)[final]
    return out


def _row_index(lane: np.ndarray, depth: np.ndarray, end_ns: np.ndarray) -> tuple[np.ndarray, ...]:
    """(row_lane, row_depth, row_offsets, row_maxend) of columns in (lane, depth, start) order."""
    n = lane.size
    row_start = np.empty(n, dtype=bool)
    if n:
        row_start[0] = True
        np.not_equal(lane[1:], lane[:-1], out=row_start[1:])
        row_start[1:] |= depth[1:] != depth[:-1]
    starts = np.flatnonzero(row_start)
    row_lane = lane[starts].astype(np.int32)
    row_depth = depth[starts].astype(np.int16)
    row_offsets = np.concatenate((starts, [n])).astype(np.int64)
    return row_lane, row_depth, row_offsets, segmented_max(end_ns, row_start)


def _writable(col: np.ndarray) -> np.ndarray:
    """An int64 column the builder may edit in place: the caller's own unless it is read-only."""
    out = np.asarray(col, dtype=np.int64)
    return out if out.flags.writeable else out.copy()


def _used_lanes(lanes: list[Lane], lane: np.ndarray) -> tuple[list[Lane], np.ndarray]:
    """Lanes that kept events (the boundary may have skipped all of a lane's), renumbered densely."""
    if not lanes:
        return lanes, lane
    used = np.zeros(len(lanes), bool)
    used[lane] = True
    if used.all():
        return lanes, lane
    remap = np.cumsum(used, dtype=np.int32) - 1
    kept = [dataclasses.replace(ln, id=int(remap[ln.id])) for ln in lanes if used[ln.id]]
    return kept, remap[lane]


def link_launches(kind: np.ndarray, corr: np.ndarray, scope: np.ndarray | None) -> np.ndarray:
    """For each GPU op, the index of the CUDA API call with the same (scope, correlation).

    When several API events share a correlation id (a runtime call wrapping a driver
    call), the first one wins, which is the outer call the user sees. ``scope`` None
    means one scope for the whole trace.
    """
    n = kind.size
    launch = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return launch
    has_corr = corr >= 0
    api_idx = np.flatnonzero((kind == int(Kind.CUDA_API)) & has_corr)
    gpu = np.isin(kind, np.asarray([int(k) for k in (*GPU_WORK_KINDS, Kind.SYNC)], np.int8))
    gpu &= has_corr
    del has_corr
    g_idx = np.flatnonzero(gpu)
    del gpu
    if api_idx.size == 0 or g_idx.size == 0:
        return launch
    # One int64 key per (scope, correlation): a dense scope code, then the id.
    mask = (1 << 40) - 1
    a_key, g_key = corr[api_idx] & mask, corr[g_idx] & mask
    span = max(int(a_key.max()), int(g_key.max())) + 1
    a_code: np.ndarray | int = 0
    g_code: np.ndarray | int = 0
    scopes = 1
    if scope is not None:
        a_scope, g_scope = scope[api_idx], scope[g_idx]
        if min(int(a_scope.min()), int(g_scope.min())) != max(int(a_scope.max()), int(g_scope.max())):
            known = np.union1d(np.unique(a_scope), np.unique(g_scope))  # any one-to-one code pairs the same
            scopes = known.size
            a_code, g_code = np.searchsorted(known, a_scope), np.searchsorted(known, g_scope)
        del a_scope, g_scope
    if scopes * span <= 4 * api_idx.size + (1 << 20):
        # Dense ids (the usual case): a table from key to the earliest call, no sort.
        a_key += a_code * span
        g_key += g_code * span
        table = np.full(scopes * span, -1, np.int64)
        table[a_key[::-1]] = api_idx[::-1]  # the last write wins: each key's earliest call
        launch[g_idx] = table[g_key]
        return launch
    a_key |= np.left_shift(a_code, 40, dtype=np.int64)
    g_key |= np.left_shift(g_code, 40, dtype=np.int64)
    order = np.argsort(a_key, kind="stable")  # ties: earliest event first (api_idx ascends)
    a_key, a_idx = a_key[order], api_idx[order]
    pos = np.searchsorted(a_key, g_key, "left")
    pos_ok = np.minimum(pos, a_idx.size - 1)
    ok = (pos < a_idx.size) & (a_key[pos_ok] == g_key)
    launch[g_idx[ok]] = a_idx[pos_ok[ok]]
    return launch
