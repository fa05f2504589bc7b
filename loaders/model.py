"""The lane model: one columnar Trace that every loader fills and every reading consumes.

Time is integer nanoseconds relative to ``meta.origin_ns``. Events live in numpy
columns sorted by (row, start), where a row is one (lane, depth) pair, so a
visible window on any row is two binary searches away.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

import numpy as np

from gaplens.loaders.text import clean_text, shorten
from gaplens.loaders.validate import Repairs, check_columns, check_events, clean_meta, clean_texts

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


class Kind(IntEnum):
    """What an event is; GPU kinds are the ones that make a device busy."""

    CPU_OP = 0
    PYTHON = 1
    ANNOTATION = 2  # user_annotation / NVTX range on a CPU thread
    CUDA_API = 3
    SYNC = 4  # GPU-side synchronisation record (cuda_sync, nsys SYNCHRONIZATION)
    KERNEL = 5
    MEMCPY_HTOD = 6
    MEMCPY_DTOH = 7
    MEMCPY_DTOD = 8
    MEMCPY_PEER = 9
    MEMCPY_OTHER = 10
    MEMSET = 11
    OSRT = 12
    GPU_ANNOTATION = 13  # gpu_user_annotation: an annotation projected on a stream
    OVERHEAD = 14
    MARK = 15  # instant (NVTX mark); start == end
    GRAPH = 16  # a whole CUDA-graph execution drawn as one box (nodes not traced)


#: Kinds that occupy the device: the union of these is "GPU busy".
GPU_WORK_KINDS = (
    Kind.KERNEL,
    Kind.MEMCPY_HTOD,
    Kind.MEMCPY_DTOH,
    Kind.MEMCPY_DTOD,
    Kind.MEMCPY_PEER,
    Kind.MEMCPY_OTHER,
    Kind.MEMSET,
    Kind.GRAPH,
)
MEMCPY_KINDS = (
    Kind.MEMCPY_HTOD,
    Kind.MEMCPY_DTOH,
    Kind.MEMCPY_DTOD,
    Kind.MEMCPY_PEER,
    Kind.MEMCPY_OTHER,
)
CPU_KINDS = (Kind.CPU_OP, Kind.PYTHON, Kind.ANNOTATION, Kind.CUDA_API, Kind.OSRT, Kind.OVERHEAD)


class LaneKind(IntEnum):
    """What a lane (one visible row group) holds."""

    CPU_OPS = 0  # cpu_op / python_function
    ANNOTATIONS = 1  # user annotations / NVTX ranges on a thread
    CUDA_API = 2
    OSRT = 3
    STREAM = 4  # one GPU stream: kernels, memcpy, memset
    GPU_ANNOTATIONS = 5  # gpu_user_annotation ranges drawn on a device
    GPU_SYNC = 6  # GPU-side sync records of a device
    OVERHEAD = 7


GPU_LANE_KINDS = (LaneKind.STREAM, LaneKind.GPU_ANNOTATIONS, LaneKind.GPU_SYNC)


@dataclass(frozen=True)
class Lane:
    """One row group the user sees; its events may stack into depth sub-rows."""

    id: int
    kind: LaneKind
    name: str
    pid: int = -1  # host process (CPU lanes); -1 for device lanes
    tid: int = -1  # host thread (CPU lanes)
    device: int = -1  # GPU index (device lanes)
    stream: int = -1  # stream id (stream lanes)
    sort_key: tuple = ()

    @property
    def is_gpu(self) -> bool:
        return self.kind in GPU_LANE_KINDS


@dataclass
class Device:
    id: int
    name: str = ""
    properties: dict = field(default_factory=dict)


#: Each format's name as the viewer's header says it (``Meta.source_format`` -> words).
FORMAT_NAMES = {
    "kineto": "Kineto",
    "nsys": "Nsight Systems",
    "xplane": "XSpace (JAX/XLA)",
    "jax-trace-json": "JAX trace JSON",
    "rocprof": "rocprofv3",
}


@dataclass
class Meta:
    """What the trace is and what it lacks, so readings can say "collect a better trace"."""

    source_format: str  # "kineto" | "nsys"
    source_version: str = ""
    path: str = ""
    origin_ns: int = 0  # absolute clock value of relative time 0
    devices: list[Device] = field(default_factory=list)
    processes: dict[int, str] = field(default_factory=dict)
    threads: dict[tuple[int, int], str] = field(default_factory=dict)
    lacks: list[str] = field(default_factory=list)  # e.g. "cpu", "cuda_api", "gpu"
    warnings: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # format-specific facts (versions, env)


#: The one sanitiser (``loaders.text``), under the name the viewer has always used.
clean_name = clean_text


class TraceError(Exception):
    """Unusable input; the message is one clean line meant for the user (trace text in it is sanitised)."""

    def __init__(self, message: object = "") -> None:
        super().__init__(shorten(message, 600))


@dataclass(repr=False)
class Trace:
    """Lanes, events (numpy columns sorted by row then start), flows and metadata.

    Columns (one entry per event):
      lane, depth, start_ns, end_ns, name_id (into ``names``), kind (``Kind``),
      corr (correlation id, -1 when none), bytes (copies/memsets, else 0),
      detail_id (into ``details``: a compact args string for the details panel),
      launch (for GPU work: index of the API event that queued it, else -1).
    Rows: ``row_lane``/``row_depth`` with ``row_offsets`` into the event columns;
    ``row_maxend`` is the running max of ``end_ns`` within each row.
    """

    meta: Meta
    lanes: list[Lane]
    names: list[str]
    details: list[str]
    lane: np.ndarray
    depth: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    name_id: np.ndarray
    kind: np.ndarray
    corr: np.ndarray
    bytes: np.ndarray
    detail_id: np.ndarray
    launch: np.ndarray
    row_lane: np.ndarray
    row_depth: np.ndarray
    row_offsets: np.ndarray
    row_maxend: np.ndarray

    def __len__(self) -> int:
        return int(self.start_ns.size)

    def __repr__(self) -> str:
        meta = self.meta
        gpus = ", ".join(sorted({d.name for d in meta.devices if d.name})) or "no GPU"
        span = int(self.end_ns.max()) - int(self.start_ns.min()) if len(self) else 0
        return (
            f"<Trace {meta.source_format} {os.path.basename(meta.path)!r}: {len(self):,} events, "
            f"{len(self.lanes)} lanes, {len(meta.devices)} GPU{'s' if len(meta.devices) != 1 else ''} ({gpus}), "
            f"{span / 1e6:,.3f} ms>"
        )

    # ---- tables -----------------------------------------------------------
    def to_arrow(self) -> pa.Table:
        """Every event as an Arrow table, names decoded (``loaders.tables``); row i is event i."""
        from gaplens.loaders.tables import events_table

        return events_table(self)

    def events(self) -> pd.DataFrame:
        """Every event as a pandas DataFrame (imports pandas on first use); the index is the event number."""
        from gaplens.loaders.tables import events_frame

        return events_frame(self)

    # ---- rows -------------------------------------------------------------
    def rows_of(self, lane_id: int) -> range:
        """Row indices belonging to one lane, shallowest first."""
        lo = int(np.searchsorted(self.row_lane, lane_id, "left"))
        hi = int(np.searchsorted(self.row_lane, lane_id, "right"))
        return range(lo, hi)

    def lane_depth(self, lane_id: int) -> int:
        rows = self.rows_of(lane_id)
        return len(rows)

    def row_slice(self, row: int) -> slice:
        return slice(int(self.row_offsets[row]), int(self.row_offsets[row + 1]))

    def lane_events(self, lane_id: int) -> slice:
        """All events of a lane (all depths) as one contiguous slice."""
        rows = self.rows_of(lane_id)
        if not rows:
            return slice(0, 0)
        return slice(int(self.row_offsets[rows.start]), int(self.row_offsets[rows.stop]))

    def lane_window(self, lane_id: int, t0_ns: int, t1_ns: int) -> np.ndarray:
        """Indices of a lane's events (every depth) overlapping [t0, t1), as ``window`` finds them row by row.

        Rows past the first ``ROWS_ONE_BY_ONE`` are filtered together in one pass over their events
        (contiguous: a lane's rows go shallowest first), so a lane nested thousands deep (ranges
        clamped to the trace's limit all end together) costs a query what a shallow one does.
        """
        rows = self.rows_of(lane_id)
        split = min(rows.start + ROWS_ONE_BY_ONE, rows.stop)
        found = [self.window(row, t0_ns, t1_ns) for row in range(rows.start, split)]
        if split < rows.stop:
            b, e = int(self.row_offsets[split]), int(self.row_offsets[rows.stop])
            starts, ends = self.start_ns[b:e], self.end_ns[b:e]
            hit = (starts < t1_ns) & ((ends > t0_ns) | ((ends == starts) & (starts >= t0_ns)))
            found.append(np.flatnonzero(hit) + b)
        return np.concatenate(found) if found else np.empty(0, dtype=np.int64)

    def window(self, row: int, t0_ns: int, t1_ns: int) -> np.ndarray:
        """Indices of events on ``row`` overlapping [t0, t1); zero-length events at t0 count."""
        b, e = int(self.row_offsets[row]), int(self.row_offsets[row + 1])
        if b == e:
            return np.empty(0, dtype=np.int64)
        # First event whose running-max end reaches t0: nothing before it can overlap.
        lo = b + int(np.searchsorted(self.row_maxend[b:e], t0_ns, "left"))
        hi = b + int(np.searchsorted(self.start_ns[b:e], t1_ns, "left"))
        if hi <= lo:
            return np.empty(0, dtype=np.int64)
        idx = np.arange(lo, hi, dtype=np.int64)
        ends = self.end_ns[lo:hi]
        starts = self.start_ns[lo:hi]
        return idx[(ends > t0_ns) | ((ends == starts) & (starts >= t0_ns))]

    # ---- convenience ------------------------------------------------------
    def name(self, i: int) -> str:
        return self.names[int(self.name_id[i])]

    def mask(self, kinds) -> np.ndarray:
        return np.isin(self.kind, np.asarray([int(k) for k in kinds], dtype=self.kind.dtype))

    def gpu_lanes(self, device: int | None = None) -> list[Lane]:
        return [ln for ln in self.lanes if ln.kind == LaneKind.STREAM and (device is None or ln.device == device)]

    def device_of_event(self) -> np.ndarray:
        """Device index per event (-1 for host events); computed once per Trace and read-only
        (readings ask for it a dozen times, each a gather over every event)."""
        cached = self.__dict__.get("_device_of_event")
        if cached is None:
            lane_dev = np.asarray([ln.device for ln in self.lanes], dtype=np.int64)
            cached = lane_dev[self.lane] if len(self.lanes) else np.empty(0, np.int64)
            cached.flags.writeable = False
            self.__dict__["_device_of_event"] = cached
        return cached

    @property
    def flows(self) -> tuple[np.ndarray, np.ndarray]:
        """(launch event, GPU event) index pairs, sorted by launch."""
        dst = np.flatnonzero(self.launch >= 0)
        src = self.launch[dst]
        order = np.argsort(src, kind="stable")
        return src[order], dst[order]

    def launched_by(self, api_index: int) -> np.ndarray:
        """GPU events queued by one launch call (many for a CUDA-graph launch)."""
        src, dst = self.flows
        lo = np.searchsorted(src, api_index, "left")
        hi = np.searchsorted(src, api_index, "right")
        return dst[lo:hi]


# ---- building ---------------------------------------------------------------


#: Rows of one lane that ``lane_window`` searches one by one; real nesting stays far shallower.
ROWS_ONE_BY_ONE = 64

# Events per pass of the depth packing: lanes are packed in groups of this many events (or one
# lane), and within a group the passes walk chunks this size; the temporaries that remain are an
# order and a sort key over one group. (Depth packing was the peak of a 1M-event load.)
PACK_GROUP = 1 << 18
_DEPTH_CAP = np.iinfo(np.int16).max


def pack_depths(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Sub-row per event so that no two events on one (lane, depth) overlap.

    Input must be sorted by (lane, start, -end). Perfectly nested slices get their
    nesting depth from a vectorised count (events opened before me minus events
    closed by my start). Partial overlaps (float rounding, PDL kernels, python vs
    cpu_op) break that count; each such slice is pushed one level deeper, pass by
    pass, until no row overlaps, instead of being dropped or asserted away. Lanes
    are independent, so they are packed a group of whole lanes at a time (``PACK_GROUP``
    events or one lane), on views of the columns: this runs at the peak of a load.
    """
    n = start.size
    depth_out = np.zeros(n, dtype=np.int16)
    if n == 0:
        return depth_out
    firsts = np.flatnonzero(_starts_of_runs(lane))
    bounds = [0]
    for at in firsts[np.searchsorted(firsts, np.arange(PACK_GROUP, n, PACK_GROUP), "right") - 1].tolist():
        if at > bounds[-1]:
            bounds.append(at)
    bounds.append(n)
    for a, b in itertools.pairwise(bounds):
        ln, st, en = lane[a:b], start[a:b], end[a:b]
        # Lanes where nothing overlaps (most GPU streams) stay on depth 0 untouched.
        new_lane = _starts_of_runs(ln)
        reach = segmented_max(en, new_lane)
        overlaps = np.zeros(b - a, dtype=bool)
        np.less(st[1:], reach[:-1], out=overlaps[1:])
        del reach
        overlaps[new_lane] = False
        if overlaps.any():
            depth_out[a:b] = _pack_nested(ln, st, en)
    return depth_out


def _starts_of_runs(values: np.ndarray) -> np.ndarray:
    """True where a run of equal values begins."""
    out = np.empty(values.size, dtype=bool)
    if values.size:
        out[0] = True
        np.not_equal(values[1:], values[:-1], out=out[1:])
    return out


def _pack_nested(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    depth = _nesting(lane, start, end)
    for _ in range(256):
        clash = _clashes(lane, depth, start, end)
        if not clash.any() or int(depth.max()) >= _DEPTH_CAP:
            return depth
        depth += clash
    return _stack_depths(lane, start, end)


def _chunks(n: int) -> Iterator[tuple[int, int]]:
    for a in range(0, n, PACK_GROUP):
        yield a, min(n, a + PACK_GROUP)


def _nesting(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Events of my lane opened before me minus those closed by my start: the depth of perfect nesting.

    Lanes are contiguous, so "opened before me" is my index minus my lane's first
    index, and "closed" counts, over the ends sorted by (lane, end), the entries of my
    lane up to my start; shifting each lane's times by its number times the clock
    span lets one sort and one searchsorted answer every lane, and the lane's first
    index cancels out: depth = index - (ends of this and earlier lanes <= my start).
    """
    n = start.size
    depth = np.empty(n, dtype=np.int16)
    firsts = np.flatnonzero(_starts_of_runs(lane))
    vmin = min(int(end.min()), int(start.min()))
    span = max(int(end.max()), int(start.max())) - vmin + 1
    if span * firsts.size >= 2**62:  # astronomically wide clocks only
        for a, b in itertools.pairwise([*firsts.tolist(), n]):
            count = np.arange(b - a) - np.searchsorted(np.sort(end[a:b]), start[a:b], "right")
            depth[a:b] = np.clip(count, 0, _DEPTH_CAP)
        return depth

    def shift(a: int, b: int) -> np.ndarray:
        """Each event's lane number times the span, less the clock's minimum, for events a..b."""
        out = np.searchsorted(firsts, np.arange(a, b), "right")
        out -= 1
        out *= span
        out -= vmin
        return out

    keys = np.empty(n, dtype=np.int64)
    for a, b in _chunks(n):
        np.add(end[a:b], shift(a, b), out=keys[a:b])
    keys.sort()
    for a, b in _chunks(n):
        count = np.arange(a, b) - np.searchsorted(keys, shift(a, b) + start[a:b], "right")
        depth[a:b] = np.clip(count, 0, _DEPTH_CAP)
    return depth


def _clashes(lane: np.ndarray, depth: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """True for every event that starts before an earlier event on its (lane, depth) row ends."""
    # Input is in (lane, start) order, so a stable sort on (lane, depth) yields rows by start;
    # the rows are then walked a chunk at a time, each chunk's running end carried into the next.
    wide = np.int32 if int(lane.max()) < 1 << 15 else np.int64

    def row_key(lane: np.ndarray, depth: np.ndarray) -> np.ndarray:
        key = lane.astype(wide)
        np.left_shift(key, 16, out=key)
        np.add(key, depth, out=key)
        return key

    order = np.argsort(row_key(lane, depth), kind="stable")
    clash = np.zeros(order.size, dtype=bool)
    last_key, last_reach = None, 0
    for a, b in _chunks(order.size):
        at = order[a:b]
        k = row_key(lane[at], depth[at])
        new_row = _starts_of_runs(k)
        reach = segmented_max(end[at], new_row, in_place=True)
        carried = last_key is not None and k[0] == last_key
        if carried:  # the chunk's first row began in the chunk before
            head = np.flatnonzero(new_row[1:])
            stop = int(head[0]) + 1 if head.size else k.size
            np.maximum(reach[:stop], last_reach, out=reach[:stop])
        starts = start[at]
        bad = np.zeros(k.size, dtype=bool)
        np.less(starts[1:], reach[:-1], out=bad[1:])
        bad[new_row] = False
        if carried:
            bad[0] = starts[0] < last_reach
        clash[at[bad]] = True
        last_key, last_reach = k[-1], int(reach[-1])
    return clash


def segmented_max(values: np.ndarray, segment_start: np.ndarray, in_place: bool = False) -> np.ndarray:
    """Running max of ``values`` restarted wherever ``segment_start`` is True (``in_place``: into ``values``)."""
    if values.size == 0:
        return values if in_place else values.copy()
    lo = int(values.min())
    span = int(values.max()) - lo + 1
    segments = int(np.count_nonzero(segment_start)) + (not segment_start[0])
    out = values if in_place else np.empty_like(values)
    if span * segments < 2**62:
        # Lift each segment above the previous one so one running max serves all; the lift is
        # computed a chunk at a time (twice) rather than held as a column.
        def lift(a: int, b: int, before: int) -> np.ndarray:
            seg = np.cumsum(segment_start[a:b], dtype=np.int64)
            seg += before - 1
            seg *= span
            seg -= lo
            return seg

        chunks = list(_chunks(values.size))
        before = [0, *np.cumsum([np.count_nonzero(segment_start[a:b]) for a, b in chunks]).tolist()]
        for (a, b), k in zip(chunks, before, strict=False):
            np.add(values[a:b], lift(a, b, k), out=out[a:b])
        np.maximum.accumulate(out, out=out)
        for (a, b), k in zip(chunks, before, strict=False):
            out[a:b] -= lift(a, b, k)
        return out
    bounds = [0, *np.flatnonzero(segment_start).tolist(), values.size]
    for a, b in itertools.pairwise(bounds):
        if b > a:
            out[a:b] = np.maximum.accumulate(values[a:b])
    return out


def _stack_depths(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Stack walk tolerant of partial overlap: a slice that outlives its parent stays deeper."""
    out = np.zeros(start.size, dtype=np.int16)
    stack: list[int] = []  # end times of open slices, by depth
    prev_lane = None
    for i, (ln, si, ei) in enumerate(zip(lane.tolist(), start.tolist(), end.tolist(), strict=True)):
        if ln != prev_lane:
            stack, prev_lane = [], ln
        while stack and stack[-1] <= si:
            stack.pop()
        out[i] = min(len(stack), _DEPTH_CAP)
        stack.append(ei)
    return out


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
    repairs = Repairs() if repairs is None else repairs
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
    lanes, cols["lane"] = _used_lanes(lanes, np.asarray(cols["lane"], dtype=np.int32))
    cols["bytes"] = _writable(cols["bytes"])
    cols["corr"] = _writable(cols["corr"])
    check_columns(cols["bytes"], cols["corr"], repairs)
    names, details = clean_texts(names, repairs), clean_texts(details, repairs)
    if repairs:
        meta.warnings.append(repairs.line())
    clean_meta(meta)
    n = int(start.size)
    origin = int(start.min()) if n else 0
    meta.origin_ns = origin
    lane = cols.pop("lane")
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
    out = {}
    for name, dtype in _DTYPES.items():
        out[name] = np.asarray(cols.pop(name), dtype=dtype)[final]
    scope = cols.pop("scope")
    scope = None if scope is None else np.asarray(scope, dtype=np.int64)[final]
    del final

    row_start = np.empty(n, dtype=bool)
    if n:
        row_start[0] = True
        np.not_equal(lane[1:], lane[:-1], out=row_start[1:])
        row_start[1:] |= depth[1:] != depth[:-1]
    starts = np.flatnonzero(row_start)
    row_lane = lane[starts].astype(np.int32)
    row_depth = depth[starts].astype(np.int16)
    row_offsets = np.concatenate((starts, [n])).astype(np.int64)
    row_maxend = segmented_max(end_ns, row_start)
    del row_start, starts
    launch = link_launches(out["kind"], out["corr"], scope)

    return Trace(
        meta=meta,
        lanes=lanes,
        names=names,
        details=details,
        lane=lane,
        depth=depth,
        start_ns=start_ns,
        end_ns=end_ns,
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


def running_max_per_row(end_ns: np.ndarray, row_offsets: np.ndarray) -> np.ndarray:
    if end_ns.size == 0:
        return end_ns.copy()
    first = np.zeros(end_ns.size, dtype=bool)
    first[row_offsets[:-1]] = True
    return segmented_max(end_ns, first)


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
