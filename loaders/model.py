"""The lane model: one columnar Trace that every loader fills and every reading consumes.

Time is integer nanoseconds relative to ``meta.origin_ns``. Events live in numpy
columns sorted by (row, start), where a row is one (lane, depth) pair, so a
visible window on any row is two binary searches away.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from gaplens.loaders.text import clean_text, shorten
from gaplens.loaders.validate import Repairs, check_columns, check_events, clean_meta, clean_texts


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


@dataclass
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
        """Device index per event (-1 for host events)."""
        lane_dev = np.asarray([ln.device for ln in self.lanes], dtype=np.int64)
        return lane_dev[self.lane] if len(self.lanes) else np.empty(0, np.int64)

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


def pack_depths(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Sub-row per event so that no two events on one (lane, depth) overlap.

    Input must be sorted by (lane, start, -end). Perfectly nested slices get their
    nesting depth from a vectorised count (events opened before me minus events
    closed by my start). Partial overlaps (float rounding, PDL kernels, python vs
    cpu_op) break that count; each such slice is pushed one level deeper, pass by
    pass, until no row overlaps, instead of being dropped or asserted away.
    """
    n = start.size
    depth_out = np.zeros(n, dtype=np.int16)
    if n == 0:
        return depth_out
    lane = np.asarray(lane, dtype=np.int64)
    # Lanes where nothing overlaps (most GPU streams) stay on depth 0 untouched.
    new_lane = np.empty(n, dtype=bool)
    new_lane[0] = True
    new_lane[1:] = lane[1:] != lane[:-1]
    reach = segmented_max(end, new_lane)
    overlaps = np.zeros(n, dtype=bool)
    overlaps[1:] = (start[1:] < reach[:-1]) & ~new_lane[1:]
    if not overlaps.any():
        return depth_out
    busy_lanes = np.unique(lane[overlaps])
    sel = np.flatnonzero(np.isin(lane, busy_lanes))
    depth_out[sel] = _pack_nested(lane[sel], start[sel], end[sel])
    return depth_out


def _pack_nested(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    n = start.size
    first = np.searchsorted(lane, lane, "left")  # index of each lane's first event
    # Nested count within each lane, vectorised across lanes by sorting (lane, end).
    end_order = np.lexsort((end, lane))
    key_end = lane[end_order], end[end_order]
    closed = _searchsorted2(key_end, lane, start) - first
    depth = (np.arange(n) - first) - closed
    depth = np.maximum(depth, 0)
    for _ in range(256):
        clash = _clashes(lane, depth, start, end)
        if not clash.any():
            return depth.astype(np.int16)
        depth = depth + clash
    return _stack_depths(lane, start, end)


def _searchsorted2(sorted_keys: tuple[np.ndarray, np.ndarray], lane: np.ndarray, t: np.ndarray) -> np.ndarray:
    """searchsorted(side='right') on (lane, value) pairs sorted lexicographically."""
    keys_lane, keys_val = sorted_keys
    # Shift values per lane so one global searchsorted answers every lane at once.
    vmin = min(int(keys_val.min()), int(t.min()))
    span = max(int(keys_val.max()), int(t.max())) - vmin + 1
    if span * (int(lane.max()) + 1) < 2**62:
        flat = keys_lane * span + (keys_val - vmin)
        q = lane * span + (t - vmin)
        return np.searchsorted(flat, q, "right")
    lo = np.searchsorted(keys_lane, lane, "left")
    hi = np.searchsorted(keys_lane, lane, "right")
    out = np.empty(lane.size, dtype=np.int64)
    for i in range(lane.size):  # astronomically wide clocks only
        out[i] = lo[i] + np.searchsorted(keys_val[lo[i] : hi[i]], t[i], "right")
    return out


def _clashes(lane: np.ndarray, depth: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """1 for every event that starts before an earlier event on its (lane, depth) row ends."""
    # Input is in (lane, start) order, so a stable sort on (lane, depth) yields rows by start.
    order = np.argsort(lane * 65536 + depth, kind="stable")
    row = lane[order] * 65536 + depth[order]
    e = end[order]
    new_row = np.empty(row.size, dtype=bool)
    new_row[0] = True
    new_row[1:] = row[1:] != row[:-1]
    reach = segmented_max(e, new_row)
    prev_reach = np.empty_like(reach)
    prev_reach[0] = np.iinfo(np.int64).min
    prev_reach[1:] = reach[:-1]
    prev_reach[new_row] = np.iinfo(np.int64).min
    bad_sorted = start[order] < prev_reach
    clash = np.zeros(row.size, dtype=np.int64)
    clash[order[bad_sorted]] = 1
    return clash


def segmented_max(values: np.ndarray, segment_start: np.ndarray) -> np.ndarray:
    """Running max of ``values`` restarted wherever ``segment_start`` is True."""
    seg = np.cumsum(segment_start) - 1
    lo = int(values.min())
    span = int(values.max()) - lo + 1
    if span * (int(seg[-1]) + 1) < 2**62:
        shifted = (values - lo) + seg * span
        return np.maximum.accumulate(shifted) - seg * span + lo
    out = np.empty_like(values)
    bounds = [*np.flatnonzero(segment_start).tolist(), values.size]
    for a, b in itertools.pairwise(bounds):
        out[a:b] = np.maximum.accumulate(values[a:b])
    return out


def _stack_depths(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Stack walk tolerant of partial overlap: a slice that outlives its parent stays deeper."""
    out = np.zeros(start.size, dtype=np.int16)
    stack: list[int] = []  # end times of open slices, by depth
    cap = np.iinfo(np.int16).max
    prev_lane = None
    for i, (ln, si, ei) in enumerate(zip(lane.tolist(), start.tolist(), end.tolist(), strict=True)):
        if ln != prev_lane:
            stack, prev_lane = [], ln
        while stack and stack[-1] <= si:
            stack.pop()
        out[i] = min(len(stack), cap)
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
    file) because ids repeat across processes. Every column passes the typed boundary
    (``loaders.validate``) first; what it skips or clamps joins ``repairs``, which
    becomes one warning line, and the metadata is sanitised.
    """
    repairs = Repairs() if repairs is None else repairs
    start_ns = np.asarray(start_ns, dtype=np.int64)
    end_ns = np.array(end_ns, dtype=np.int64)  # a copy: the boundary clamps it in place
    keep = check_events(start_ns, end_ns, repairs)
    if not keep.all():
        start_ns, end_ns = start_ns[keep], end_ns[keep]
        lane, name_id, kind = np.asarray(lane)[keep], np.asarray(name_id)[keep], np.asarray(kind)[keep]
        corr, nbytes, detail_id = np.asarray(corr)[keep], np.asarray(nbytes)[keep], np.asarray(detail_id)[keep]
        corr_scope = None if corr_scope is None else np.asarray(corr_scope)[keep]
    lanes, lane = _used_lanes(lanes, np.asarray(lane, dtype=np.int32))
    nbytes = np.array(nbytes, dtype=np.int64)
    corr = np.array(corr, dtype=np.int64)
    check_columns(nbytes, corr, repairs)
    names, details = clean_texts(names, repairs), clean_texts(details, repairs)
    if repairs:
        meta.warnings.append(repairs.line())
    clean_meta(meta)
    n = int(start_ns.size)
    origin = int(start_ns.min()) if n else 0
    meta.origin_ns = origin
    order = np.lexsort((start_ns - end_ns, start_ns, lane))  # parents before children
    lane_s, start_s, end_s = lane[order], start_ns[order], end_ns[order]
    depth = pack_depths(lane_s, start_s, end_s)
    # Final order (lane, depth, start): each row contiguous and sorted. One gather per column.
    order2 = np.argsort(lane_s.astype(np.int64) * 65536 + depth, kind="stable")
    final = order[order2]
    lane, depth = lane_s[order2], depth[order2]
    start_ns, end_ns = start_s[order2] - origin, end_s[order2] - origin
    name_id = np.asarray(name_id, dtype=np.int32)[final]
    kind = np.asarray(kind, dtype=np.int8)[final]
    corr = np.asarray(corr, dtype=np.int64)[final]
    nbytes = np.asarray(nbytes, dtype=np.int64)[final]
    detail_id = np.asarray(detail_id, dtype=np.int32)[final]
    scope = np.zeros(n, dtype=np.int64) if corr_scope is None else np.asarray(corr_scope, dtype=np.int64)[final]

    key = lane.astype(np.int64) * 65536 + depth.astype(np.int64)
    if n:
        starts = np.concatenate(([0], np.flatnonzero(np.diff(key)) + 1))
        row_lane = lane[starts].astype(np.int32)
        row_depth = depth[starts].astype(np.int16)
        row_offsets = np.concatenate((starts, [n])).astype(np.int64)
    else:
        row_lane = np.empty(0, np.int32)
        row_depth = np.empty(0, np.int16)
        row_offsets = np.zeros(1, np.int64)
    row_maxend = running_max_per_row(end_ns, row_offsets)
    launch = link_launches(kind, corr, scope)

    return Trace(
        meta=meta,
        lanes=lanes,
        names=names,
        details=details,
        lane=lane,
        depth=depth,
        start_ns=start_ns,
        end_ns=end_ns,
        name_id=name_id,
        kind=kind,
        corr=corr,
        bytes=nbytes,
        detail_id=detail_id,
        launch=launch,
        row_lane=row_lane,
        row_depth=row_depth,
        row_offsets=row_offsets,
        row_maxend=row_maxend,
    )


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


def link_launches(kind: np.ndarray, corr: np.ndarray, scope: np.ndarray) -> np.ndarray:
    """For each GPU op, the index of the CUDA API call with the same (scope, correlation).

    When several API events share a correlation id (a runtime call wrapping a driver
    call), the first one wins, which is the outer call the user sees.
    """
    n = kind.size
    launch = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return launch
    gpu = np.isin(kind, np.asarray([int(k) for k in (*GPU_WORK_KINDS, Kind.SYNC)], np.int8))
    api = (kind == int(Kind.CUDA_API)) & (corr >= 0)
    gpu &= corr >= 0
    if not api.any() or not gpu.any():
        return launch
    # One int64 key per (scope, correlation): dense scope code in the high bits.
    codes = np.unique(scope, return_inverse=True)[1].astype(np.int64)
    key = (codes << 40) | (corr & ((1 << 40) - 1))
    api_idx = np.flatnonzero(api)
    order = np.lexsort((api_idx, key[api_idx]))  # ties: earliest event first
    a_key, a_idx = key[api_idx][order], api_idx[order]
    g_idx = np.flatnonzero(gpu)
    g_key = key[g_idx]
    pos = np.searchsorted(a_key, g_key, "left")
    pos_ok = np.minimum(pos, a_idx.size - 1)
    ok = (pos < a_idx.size) & (a_key[pos_ok] == g_key)
    launch[g_idx[ok]] = a_idx[pos_ok[ok]]
    return launch
