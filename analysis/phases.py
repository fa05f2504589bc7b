"""Phases: user annotations / NVTX ranges, placed on the GPU timeline as CUDA events would see them.

A phase is a host range [s, e]. Its GPU span is where a marker enqueued at s and at
e would execute on the device: M(t) = max(t, end of every GPU op launched before t).
That is what ``torch.cuda.Event`` timing measures, so it is comparable to ground
truth, and it needs no GPU-side annotation (nsys has none).

    host   |--- decode (24 ms, launches run ahead) ---|
    GPU        ███ ███ ███ ███ ███ ███ ███ ███ ███ ███ ███ ███
    phase  [M(s) ................................................ M(e)]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from gaplens.analysis.busy import BusySpans, gpu_work
from gaplens.loaders.model import Kind, LaneKind, Trace, segmented_max

# The profiler's own step markers are not the user's phases.
_PROFILER_NAMES = re.compile(r"^(ProfilerStep#\d+|PyTorch Profiler.*)$")


@dataclass(frozen=True)
class Phase:
    name: str
    host_start_ns: int
    host_end_ns: int
    start_ns: int  # GPU-side span (marker semantics)
    end_ns: int
    depth: int
    event: int  # index of the annotation event

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


class MarkerClock:
    """M(t) per stream: when a marker enqueued on the host at t would run on that stream.

    A phase is timed on the stream that ran most of the work it launched (the stream
    its CUDA events were recorded on), else on the busiest stream of the trace.
    """

    def __init__(self, trace: Trace) -> None:
        idx = gpu_work(trace)
        launch = trace.launch[idx]
        queued = np.where(launch >= 0, trace.start_ns[np.maximum(launch, 0)], trace.start_ns[idx])
        lane = trace.lane[idx]
        order = np.lexsort((queued, lane))
        self.lane, self.queued = lane[order], queued[order]
        ends = trace.end_ns[idx][order]
        first = np.ones(self.lane.size, dtype=bool)
        first[1:] = self.lane[1:] != self.lane[:-1]
        self.reach = segmented_max(ends, first) if ends.size else ends
        # Each GPU lane's slice of the (lane, queued)-sorted arrays.
        self.lanes = self.lane[first]
        self.bounds = np.r_[np.flatnonzero(first), self.lane.size]
        busy = np.bincount(lane, weights=trace.end_ns[idx] - trace.start_ns[idx]) if idx.size else np.zeros(0)
        self.main_lane = int(np.argmax(busy)) if len(busy) else -1

    def stream_for(self, t0: int, t1: int) -> int:
        """The lane that ran most of the GPU ops queued during [t0, t1): O(lanes × log n)."""
        best, best_count = self.main_lane, 0
        for k, lane in enumerate(self.lanes.tolist()):
            seg = self.queued[self.bounds[k] : self.bounds[k + 1]]
            count = int(np.searchsorted(seg, t1, "left") - np.searchsorted(seg, t0, "left"))
            if count > best_count:
                best, best_count = lane, count
        return best

    def at(self, lane: int, t: int) -> int:
        hit = np.flatnonzero(self.lanes == lane)
        if hit.size == 0:
            return t
        lo, hi = int(self.bounds[hit[0]]), int(self.bounds[hit[0] + 1])
        k = lo + int(np.searchsorted(self.queued[lo:hi], t, "left"))  # work queued at t is not yet done at t
        return max(t, int(self.reach[k - 1])) if k > lo else t


def phases(trace: Trace) -> list[Phase]:
    """Every annotation range of the host threads, in start order, with its GPU span."""
    idx = np.flatnonzero(trace.kind == int(Kind.ANNOTATION))
    clock = MarkerClock(trace)
    api_by_thread = _api_calls_by_thread(trace)
    out = []
    for i in idx[np.argsort(trace.start_ns[idx], kind="stable")].tolist():
        name = trace.names[int(trace.name_id[i])]
        if _PROFILER_NAMES.match(name):
            continue
        s, e = int(trace.start_ns[i]), int(trace.end_ns[i])
        # The device learns of a phase at its first CUDA call and is done with it when the
        # work queued by its last call finishes; host time before/after is not GPU time.
        a, b = s, e
        ln = trace.lanes[int(trace.lane[i])]
        calls = api_by_thread.get((ln.pid, ln.tid))
        if calls is not None and clock.queued.size:
            starts, ends = calls
            lo, hi = np.searchsorted(starts, s, "left"), np.searchsorted(starts, e, "right")
            if hi > lo:
                a, b = int(starts[lo]), min(e, int(ends[lo:hi].max()))
        lane = clock.stream_for(s, e)
        out.append(Phase(name, s, e, clock.at(lane, a), clock.at(lane, b), int(trace.depth[i]), i))
    return out


def _api_calls_by_thread(trace: Trace) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """Sorted (start, end) of CUDA API calls per host thread."""
    out = {}
    for ln in trace.lanes:
        if ln.kind != LaneKind.CUDA_API:
            continue
        sl = trace.lane_events(ln.id)
        starts, ends = trace.start_ns[sl], trace.end_ns[sl]
        order = np.argsort(starts, kind="stable")
        out[(ln.pid, ln.tid)] = (starts[order], ends[order])
    return out


def phase_busy_pct(phase: Phase, busy: BusySpans) -> float:
    return 100.0 * busy.busy_in(phase.start_ns, phase.end_ns) / phase.dur_ns if phase.dur_ns > 0 else 0.0
