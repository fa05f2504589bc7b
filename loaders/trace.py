"""The Trace: a trace's events as numpy columns sorted by (row, start), and the queries over its rows.

Time is integer nanoseconds relative to ``meta.origin_ns``. A row is one (lane, depth) pair,
so a visible window on any row is two binary searches away. ``loaders.build`` makes a Trace.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gaplens.loaders.kinds import LaneKind
from gaplens.loaders.meta import Lane, Meta
from gaplens.loaders.tables import events_frame, events_table

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

#: Rows of one lane that ``lane_window`` searches one by one; real nesting stays far shallower.
ROWS_ONE_BY_ONE = 64


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
        return events_table(self)

    def events(self) -> pd.DataFrame:
        """Every event as a pandas DataFrame (imports pandas on first use); the index is the event number."""
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
            ids = [ln.device for ln in self.lanes]
            # The narrowest type the device ids fit: one entry per event (5M events: 10 MB in int16, 40 in int64).
            dtype = next(
                t for t in (np.int16, np.int32, np.int64) if all(np.iinfo(t).min <= d <= np.iinfo(t).max for d in ids)
            )
            lane_dev = np.asarray(ids, dtype=dtype)
            cached = lane_dev[self.lane] if len(self.lanes) else np.empty(0, np.int16)
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
