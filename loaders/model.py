"""The lane model: one columnar Trace that every loader fills and every reading consumes.

Time is integer nanoseconds relative to ``meta.origin_ns``. Events live in numpy
columns sorted by (row, start), where a row is one (lane, depth) pair, so a
visible window on any row is two binary searches away.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np


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


# C0 and C1 controls, DEL, and the lone ESC-introduced sequences they start.
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|[\x00-\x1f\x7f-\x9f]")


def clean_name(text: str) -> str:
    """Strip terminal control characters and escape sequences from an untrusted name."""
    return _CONTROL.sub("", text) if _CONTROL.search(text) else text


class TraceError(Exception):
    """Unusable input; the message is one line meant for the user."""


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
    nesting depth from a vectorised count; lanes where partial overlaps (float
    rounding, PDL kernels, python vs cpu_op) break that count fall back to a stack
    walk that puts the overlapping slice one level deeper instead of dropping it.
    """
    n = start.size
    depth = np.zeros(n, dtype=np.int16)
    if n == 0:
        return depth
    bounds = np.flatnonzero(np.diff(lane)) + 1
    seg_lo = np.concatenate(([0], bounds))
    seg_hi = np.concatenate((bounds, [n]))
    for lo, hi in zip(seg_lo.tolist(), seg_hi.tolist(), strict=True):
        s = start[lo:hi]
        e = end[lo:hi]
        if hi - lo == 1 or bool(np.all(s[1:] >= np.maximum.accumulate(e)[:-1])):
            continue  # no overlap at all: everything on depth 0
        # Nested count: events started before me minus events ended by my start.
        ends_sorted = np.sort(e)
        opened = np.arange(hi - lo)
        closed = np.searchsorted(ends_sorted, s, "right")
        d = opened - closed
        # Zero-length events ending exactly at my start were counted as closed; fine.
        if _rows_clean(s, e, d):
            depth[lo:hi] = d
        else:
            depth[lo:hi] = _stack_depths(s, e)
    return depth


def _rows_clean(s: np.ndarray, e: np.ndarray, d: np.ndarray) -> bool:
    if d.size and d.min() < 0:
        return False
    order = np.lexsort((s, d))
    ds, ss, es = d[order], s[order], e[order]
    same = ds[1:] == ds[:-1]
    return not bool(np.any(same & (ss[1:] < es[:-1])))


def _stack_depths(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Stack walk tolerant of partial overlap: a slice that outlives its parent stays deeper."""
    out = np.zeros(s.size, dtype=np.int16)
    stack: list[int] = []  # end times of open slices, by depth
    for i, (si, ei) in enumerate(zip(s.tolist(), e.tolist(), strict=True)):
        while stack and stack[-1] <= si:
            stack.pop()
        out[i] = min(len(stack), np.iinfo(np.int16).max)
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
) -> Trace:
    """Sort, pack depths, index rows and link launches; times are absolute ns on input.

    ``corr_scope`` keys correlation ids (nsys: the process; Kineto: one scope per
    file) because ids repeat across processes.
    """
    n = int(start_ns.size)
    start_ns = np.asarray(start_ns, dtype=np.int64)
    end_ns = np.maximum(np.asarray(end_ns, dtype=np.int64), start_ns)
    origin = int(start_ns.min()) if n else 0
    meta.origin_ns = origin
    order = np.lexsort((-(end_ns - start_ns), start_ns, lane))
    lane = np.asarray(lane, dtype=np.int32)[order]
    start_ns = start_ns[order] - origin
    end_ns = end_ns[order] - origin
    name_id = np.asarray(name_id, dtype=np.int32)[order]
    kind = np.asarray(kind, dtype=np.int8)[order]
    corr = np.asarray(corr, dtype=np.int64)[order]
    nbytes = np.asarray(nbytes, dtype=np.int64)[order]
    detail_id = np.asarray(detail_id, dtype=np.int32)[order]
    scope = np.zeros(n, dtype=np.int64) if corr_scope is None else np.asarray(corr_scope, dtype=np.int64)[order]

    depth = pack_depths(lane, start_ns, end_ns)
    # Final order: (lane, depth, start) so each row is contiguous and sorted.
    order2 = np.lexsort((start_ns, depth, lane))
    lane, depth, start_ns, end_ns = lane[order2], depth[order2], start_ns[order2], end_ns[order2]
    name_id, kind, corr = name_id[order2], kind[order2], corr[order2]
    nbytes, detail_id, scope = nbytes[order2], detail_id[order2], scope[order2]

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
    row_maxend = _running_max_per_row(end_ns, row_offsets)
    launch = link_launches(kind, corr, scope)

    return Trace(
        meta=meta,
        lanes=lanes,
        names=[clean_name(s) for s in names],
        details=[clean_name(s) for s in details],
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


def _running_max_per_row(end_ns: np.ndarray, row_offsets: np.ndarray) -> np.ndarray:
    """Running max of ends, restarted at each row, without a per-event loop."""
    if end_ns.size == 0:
        return end_ns.copy()
    # Offset each row by a large per-row constant so one global accumulate never
    # carries a max across a row boundary.
    rows = np.repeat(np.arange(row_offsets.size - 1), np.diff(row_offsets))
    span = int(end_ns.max()) - int(end_ns.min()) + 1
    base = int(end_ns.min())
    if span * (row_offsets.size) < 2**62:
        shifted = (end_ns - base) + rows.astype(np.int64) * span
        return np.maximum.accumulate(shifted) - rows.astype(np.int64) * span + base
    out = np.empty_like(end_ns)
    for r in range(row_offsets.size - 1):
        b, e = row_offsets[r], row_offsets[r + 1]
        out[b:e] = np.maximum.accumulate(end_ns[b:e])
    return out


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
