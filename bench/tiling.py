"""Synthetic big traces for the benchmarks: a real trace repeated end to end in time."""

from __future__ import annotations

import numpy as np

from gaplens.loaders.model import Trace
from gaplens.loaders.rows import running_max_per_row


def tile_trace(trace: Trace, times: int) -> Trace:
    """``times`` copies of ``trace`` end to end with unique correlation ids.

    Built row by row from the already sorted rows, so a 10M-event trace takes seconds,
    not a re-sort of every event.
    """
    span = int(trace.end_ns.max()) + 1_000_000
    offs = trace.row_offsets
    lens = np.diff(offs)
    new_offs = np.concatenate(([0], np.cumsum(lens * times))).astype(np.int64)
    n = int(new_offs[-1])
    # For every new slot: (source event, tile number), row by row.
    src = np.empty(n, np.int64)
    tile = np.empty(n, np.int64)
    for r in range(lens.size):  # per row (tens), never per event
        b, e = int(offs[r]), int(offs[r + 1])
        lo, hi = int(new_offs[r]), int(new_offs[r + 1])
        src[lo:hi] = np.tile(np.arange(b, e), times)
        tile[lo:hi] = np.repeat(np.arange(times), e - b)
    row_of = np.repeat(np.arange(lens.size), lens)

    # Where event i of tile k lands, to remap launch links.
    def new_index(i: np.ndarray, k: np.ndarray) -> np.ndarray:
        r = row_of[i]
        return new_offs[r] + k * lens[r] + (i - offs[r])

    launch = trace.launch[src]
    has = launch >= 0
    launch = np.where(has, new_index(np.maximum(launch, 0), tile), -1)
    corr_span = int(trace.corr.max()) + 1
    start = trace.start_ns[src] + tile * span
    end = trace.end_ns[src] + tile * span
    return Trace(
        meta=trace.meta,
        lanes=trace.lanes,
        names=trace.names,
        details=trace.details,
        lane=trace.lane[src],
        depth=trace.depth[src],
        start_ns=start,
        end_ns=end,
        name_id=trace.name_id[src],
        kind=trace.kind[src],
        corr=np.where(trace.corr[src] >= 0, trace.corr[src] + tile * corr_span, -1),
        bytes=trace.bytes[src],
        detail_id=trace.detail_id[src],
        launch=launch,
        row_lane=trace.row_lane,
        row_depth=trace.row_depth,
        row_offsets=new_offs,
        row_maxend=running_max_per_row(end, new_offs),
    )


def tile_to(trace: Trace, target_events: int) -> Trace:
    """Repeat ``trace`` until it holds at least ``target_events`` events."""
    return tile_trace(trace, max(1, -(-target_events // max(len(trace), 1))))
