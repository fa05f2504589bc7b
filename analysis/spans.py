"""Disjoint spans: the union of intervals, and prefix sums of their length for O(log n) window queries.

    intervals  ████    ██████
                 ██████          ██
    union      ██████████████    ██
    B(t)       busy time before t: B(right) - B(left) is the busy time of a window

The interval arithmetic that ``analysis.busy`` (a device's busy time), ``analysis.comm`` and what-if
stand on; it knows nothing of traces.
"""

from __future__ import annotations

import numpy as np


def union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into sorted, disjoint [start, end) spans (vectorised)."""
    if start.size == 0:
        return start.astype(np.int64), end.astype(np.int64)
    order = np.argsort(start, kind="stable")
    s, e = start[order].astype(np.int64), end[order].astype(np.int64)
    reach = np.maximum.accumulate(e)
    # A new span begins where the start is past everything seen so far.
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    ends = np.concatenate((reach[idx[1:] - 1], reach[-1:]))
    return s[idx], ends


def clip_total(span_start: np.ndarray, span_end: np.ndarray, t0: int, t1: int) -> int:
    """Total length of disjoint spans inside [t0, t1)."""
    if span_start.size == 0 or t1 <= t0:
        return 0
    s = np.clip(span_start, t0, t1)
    e = np.clip(span_end, t0, t1)
    return int((e - s).sum())


class BusySpans:
    """Disjoint busy spans of one device, with prefix sums for O(log n) window queries."""

    def __init__(self, start: np.ndarray, end: np.ndarray) -> None:
        self.start, self.end = union(start, end)
        self.cum = np.concatenate(([0], np.cumsum(self.end - self.start)))

    def busy_before(self, t: np.ndarray | int) -> np.ndarray:
        """B(t): busy time in (-inf, t); vectorised over t."""
        t = np.asarray(t, dtype=np.int64)
        if self.start.size == 0:  # no GPU work at all (CPU-only or broken capture)
            return np.zeros(t.shape, dtype=np.int64)
        k = np.searchsorted(self.start, t, "right")  # spans starting at or before t
        partial = np.where(k > 0, np.minimum(t, self.end[np.maximum(k - 1, 0)]) - self.start[np.maximum(k - 1, 0)], 0)
        full = self.cum[np.maximum(k - 1, 0)]
        return np.where(k > 0, full + partial, 0)

    def busy_in(self, t0: int, t1: int) -> int:
        if t1 <= t0:
            return 0
        b = self.busy_before(np.asarray([t0, t1]))
        return int(b[1] - b[0])

    @property
    def total(self) -> int:
        return int(self.cum[-1])
