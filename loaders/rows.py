"""Rows of a lane: which depth sub-row each event takes so that no row overlaps, and running maxima per row.

Both run over whole columns at the peak of a load, vectorised and a chunk at a time.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

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
    """Each pass pushes every clashing slice one row deeper. A row's slices that did not clash never clash among
    themselves once the clashing ones left (a row's reach only shrinks), so after the first pass only the rows
    that received slices can clash: each pass reads those rows alone. The depths are those of passes over every
    row (ranges straddling each other took 89 passes over 206k events: 0.44 s of an NVTX-heavy nsys load)."""
    depth = _nesting(lane, start, end)
    rows = np.arange(start.size)  # the events whose rows may clash, in (lane, start) order
    for _ in range(256):
        clash = _clashes(lane[rows], depth[rows], start[rows], end[rows])
        if not clash.any() or int(depth.max()) >= _DEPTH_CAP:
            return depth
        moved = rows[clash]
        depth[moved] += 1
        wide = np.int64(1 << 16)
        key = lane.astype(np.int64) * wide + depth
        rows = np.flatnonzero(np.isin(key, np.unique(lane[moved].astype(np.int64) * wide + depth[moved])))
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


def running_max_per_row(end_ns: np.ndarray, row_offsets: np.ndarray) -> np.ndarray:
    """``segmented_max`` of the ends, restarted at each row's first event (a Trace's ``row_maxend``)."""
    if end_ns.size == 0:
        return end_ns.copy()
    first = np.zeros(end_ns.size, dtype=bool)
    first[row_offsets[:-1]] = True
    return segmented_max(end_ns, first)
