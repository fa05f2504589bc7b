"""Per-name statistics of one class of events, shaped like `nsys stats` (cuda_gpu_kern_sum, cuda_api_sum, nvtx_sum).

One sort orders the class's events by (name, duration); every statistic of every
name is then a ``reduceat`` or a gather at the group bounds, never a per-name loop:

    events   k1 k1 k1 k2 k2 k3        sorted by (name, duration)
    offsets  0        3     5  6      row r's instances are events[offsets[r]:offsets[r+1]]
    min = first of a group, max = last, median = the middle one (or the mean of two)

The summary command, the Python API and the viewer's statistics screen all read
these rows; nothing else computes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gaplens.analysis.memo import per_trace
from gaplens.loaders.model import Kind, Trace

#: The three tables: (key, title, event kinds). Ranges are the user's own annotations (NVTX / record_function).
TABLES: tuple[tuple[str, str, tuple[Kind, ...]], ...] = (
    ("kernels", "Kernels", (Kind.KERNEL,)),
    ("cuda_api", "CUDA API", (Kind.CUDA_API,)),
    ("ranges", "Ranges", (Kind.ANNOTATION,)),
)

#: Sortable columns of a table, in display order (``name`` sorts alphabetically).
COLUMNS = ("pct", "total_ns", "count", "avg_ns", "med_ns", "min_ns", "max_ns", "name")


@dataclass
class NameStats:
    """One row per distinct name, largest total first; instances kept for drill-down."""

    names: list[str]  # the trace's name table (shared, not copied)
    name_id: np.ndarray
    count: np.ndarray
    total_ns: np.ndarray
    avg_ns: np.ndarray
    med_ns: np.ndarray
    min_ns: np.ndarray
    max_ns: np.ndarray
    pct: np.ndarray  # share of the class's total time, unrounded
    events: np.ndarray  # event indices grouped by row, shortest first within a row
    offsets: np.ndarray  # (rows + 1,) bounds of each row's group in ``events``

    def __len__(self) -> int:
        return int(self.name_id.size)

    def name(self, k: int) -> str:
        return self.names[int(self.name_id[k])]

    def instances(self, k: int) -> np.ndarray:
        """Event indices of row ``k``, shortest first."""
        return self.events[int(self.offsets[k]) : int(self.offsets[k + 1])]

    def order(self, column: str, descending: bool = True) -> np.ndarray:
        """Row indices sorted by one of ``COLUMNS`` (stable, so equal values keep the total order)."""
        if column == "name":
            keys = np.asarray([self.names[int(i)].casefold() for i in self.name_id.tolist()], dtype=object)
            order = np.asarray(sorted(range(len(self)), key=keys.__getitem__), dtype=np.int64)
            return order[::-1] if descending else order
        values = getattr(self, column)
        return np.argsort(-values if descending else values, kind="stable")

    def rows(self, top: int | None = None) -> list[dict]:
        """The first ``top`` rows as the ``summary --json`` contract spells them (``pct`` rounded once, here)."""
        n = len(self) if top is None else min(top, len(self))
        return [
            {
                "name": self.name(k),
                "count": int(self.count[k]),
                "total_ns": int(self.total_ns[k]),
                "avg_ns": int(self.avg_ns[k]),
                "med_ns": int(self.med_ns[k]),
                "min_ns": int(self.min_ns[k]),
                "max_ns": int(self.max_ns[k]),
                "pct": round(float(self.pct[k]), 2),
            }
            for k in range(n)
        ]


def name_stats(trace: Trace, kinds) -> NameStats:
    """Count, total, average, median, min, max and share per name over events of ``kinds``."""
    idx = np.flatnonzero(trace.mask(kinds))
    dur = (trace.end_ns[idx] - trace.start_ns[idx]).astype(np.int64)
    names = trace.name_id[idx]
    order = np.lexsort((dur, names))
    idx, dur, names = idx[order], dur[order], names[order]
    if idx.size == 0:
        z = np.zeros(0, np.int64)
        return NameStats(trace.names, z, z, z, z, z, z, z, np.zeros(0), z, np.zeros(1, np.int64))
    bounds = np.flatnonzero(np.diff(names)) + 1
    lo = np.concatenate(([0], bounds))
    hi = np.concatenate((bounds, [names.size]))
    count = (hi - lo).astype(np.int64)
    total = np.add.reduceat(dur, lo)
    grand = int(dur.sum()) or 1
    # Middle element(s) of each sorted group: the mean of two for an even count, as np.median gives.
    med = ((dur[lo + (count - 1) // 2] + dur[lo + count // 2]) / 2).astype(np.int64)
    rank = np.argsort(-total, kind="stable")  # largest total first; ties keep name order
    group = np.repeat(np.arange(lo.size), count)
    # Events regrouped in row order, each group still shortest first.
    events = idx[np.argsort(np.argsort(rank)[group], kind="stable")]
    return NameStats(
        names=trace.names,
        name_id=names[lo][rank].astype(np.int64),
        count=count[rank],
        total_ns=total[rank],
        avg_ns=(total / count).astype(np.int64)[rank],
        med_ns=med[rank],
        min_ns=dur[lo][rank],
        max_ns=dur[hi - 1][rank],
        pct=(100.0 * total / grand)[rank],
        events=events,
        offsets=np.concatenate(([0], np.cumsum(count[rank]))).astype(np.int64),
    )


@per_trace
def table_stats(trace: Trace) -> dict[str, NameStats]:
    """The three tables of a trace (kernels, CUDA API, ranges), computed once while the trace lives."""
    return {key: name_stats(trace, kinds) for key, _title, kinds in TABLES}
