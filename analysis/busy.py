"""GPU busy time: the union of kernel/memcpy/memset intervals over all streams of a device.

Never a per-stream sum: two overlapping streams are busy once, not twice.

    stream 7   ████    ██████
    stream 13    ██████          ██
    busy       ██████████████    ██    <- union

Busy splits into compute and communication (``analysis.comm``); ``busy_share`` is the one
place that turns these into the numbers every screen and command prints.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gaplens.analysis.memo import per_trace
from gaplens.loaders.model import GPU_WORK_KINDS, Kind, Trace


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


def gpu_work(trace: Trace, device: int | None = None) -> np.ndarray:
    """Indices of events that make a device busy (all devices when ``device`` is None)."""
    mask = trace.mask(GPU_WORK_KINDS)
    if device is not None:
        mask &= trace.device_of_event() == device
    return np.flatnonzero(mask)


def device_busy(trace: Trace, device: int) -> BusySpans:
    idx = gpu_work(trace, device)
    return BusySpans(trace.start_ns[idx], trace.end_ns[idx])


def gpu_window(trace: Trace, device: int | None = None) -> tuple[int, int]:
    """First to last GPU activity: the default analysis window (whole trace if no GPU work)."""
    idx = gpu_work(trace, device)
    if idx.size == 0:
        if len(trace) == 0:
            return 0, 0
        return int(trace.start_ns.min()), int(trace.end_ns.max())
    return int(trace.start_ns[idx].min()), int(trace.end_ns[idx].max())


@dataclass(frozen=True)
class Split:
    """One device's busy time as three unions: all GPU work, compute only, communication only."""

    busy: BusySpans
    compute: BusySpans
    comm: BusySpans


@per_trace
def device_splits(trace: Trace) -> dict[int, Split]:
    """Split per device (cached while the trace lives)."""
    from gaplens.analysis.comm import comm_mask

    comm = comm_mask(trace)
    dev = trace.device_of_event()
    work = trace.mask(GPU_WORK_KINDS)
    out = {}
    for d in trace.meta.devices:
        on = work & (dev == d.id)
        c = on & comm
        k = on & ~comm
        out[d.id] = Split(
            BusySpans(trace.start_ns[on], trace.end_ns[on]),
            BusySpans(trace.start_ns[k], trace.end_ns[k]),
            BusySpans(trace.start_ns[c], trace.end_ns[c]),
        )
    return out


def compute_busy(trace: Trace, device: int) -> BusySpans:
    """Compute-only busy spans of one device: what verdicts about density and pacing use."""
    split = device_splits(trace).get(device)
    return split.compute if split is not None else BusySpans(np.empty(0, np.int64), np.empty(0, np.int64))


@dataclass(frozen=True)
class DeviceShare:
    """What one device did over its window: busy, compute, communication, exposed communication."""

    id: int
    name: str
    window_ns: tuple[int, int]
    busy_ns: int
    compute_ns: int
    comm_ns: int
    exposed_comm_ns: int

    @property
    def span_ns(self) -> int:
        return self.window_ns[1] - self.window_ns[0]

    @property
    def busy_pct(self) -> float:
        return pct(self.busy_ns, self.span_ns)

    @property
    def compute_pct(self) -> float:
        return pct(self.compute_ns, self.span_ns)


@dataclass(frozen=True)
class BusyShare:
    """THE busy reading: per device, and summed over devices (DESIGN.md § GPU busy).

    ``profiler_ns`` is the time the profiler itself took (its overhead rows) inside the GPU window.
    """

    devices: list[DeviceShare]
    window_ns: tuple[int, int]
    profiler_ns: int

    @property
    def busy_ns(self) -> int:
        return sum(d.busy_ns for d in self.devices)

    @property
    def compute_ns(self) -> int:
        return sum(d.compute_ns for d in self.devices)

    @property
    def comm_ns(self) -> int:
        return sum(d.comm_ns for d in self.devices)

    @property
    def exposed_comm_ns(self) -> int:
        return sum(d.exposed_comm_ns for d in self.devices)

    @property
    def device_ns(self) -> int:
        """The summed device windows: the denominator of every overall share."""
        return sum(d.span_ns for d in self.devices)

    @property
    def busy_pct(self) -> float:
        return pct(self.busy_ns, self.device_ns)

    @property
    def compute_pct(self) -> float:
        return pct(self.compute_ns, self.device_ns)

    @property
    def exposed_comm_pct(self) -> float:
        return pct(self.exposed_comm_ns, self.device_ns)

    @property
    def profiler_pct(self) -> float:
        return pct(self.profiler_ns, self.window_ns[1] - self.window_ns[0])

    def to_json(self) -> dict:
        """The ``gpu`` object of the JSON contract."""
        return {
            "busy_ns": self.busy_ns,
            "busy_pct": self.busy_pct,
            "compute_ns": self.compute_ns,
            "compute_pct": self.compute_pct,
            "comm_ns": self.comm_ns,
            "exposed_comm_ns": self.exposed_comm_ns,
            "profiler_ns": self.profiler_ns,
            "profiler_pct": self.profiler_pct,
        }


def pct(part: int, whole: int) -> float:
    """Unrounded percentage: text output rounds once, when it prints."""
    return 100.0 * part / whole if whole > 0 else 0.0


@per_trace
def busy_share(trace: Trace) -> BusyShare:
    """Busy, compute, communication and exposed communication per device over each device's window."""
    splits = device_splits(trace)
    devices = []
    for d in trace.meta.devices:
        sp = splits[d.id]
        w0, w1 = gpu_window(trace, d.id)
        busy = sp.busy.busy_in(w0, w1)
        compute = sp.compute.busy_in(w0, w1)
        devices.append(DeviceShare(d.id, d.name, (w0, w1), busy, compute, sp.comm.busy_in(w0, w1), busy - compute))
    w0, w1 = gpu_window(trace)
    return BusyShare(devices, (w0, w1), profiler_time(trace, w0, w1))


def profiler_time(trace: Trace, t0: int, t1: int) -> int:
    """Time inside [t0, t1) covered by the profiler's own overhead rows (buffer flushes and the like)."""
    spans = overhead_spans(trace)
    return spans.busy_in(t0, t1)


@per_trace
def overhead_spans(trace: Trace) -> BusySpans:
    """The union of the profiler's overhead rows (Kineto ``overhead``, nsys ``PROFILER_OVERHEAD``)."""
    m = trace.kind == int(Kind.OVERHEAD)
    return BusySpans(trace.start_ns[m], trace.end_ns[m])
