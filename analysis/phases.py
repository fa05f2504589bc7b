"""Phases: the user's own ranges, placed on the GPU timeline as CUDA events would see them.

A phase is a host range [s, e] on one thread of one process. Its GPU span is where a marker
enqueued at s and at e would execute on the device: M(t) = max(t, end of every GPU op queued
on that stream before t). That is what ``torch.cuda.Event`` timing measures, so it is
comparable to ground truth, and it needs no GPU-side annotation (nsys has none).

    main thread |--- backward (loss.backward() blocks) ---|
    autograd       cudaLaunchKernel ▕▏▕▏▕▏▕▏▕▏▕▏            <- same process, another thread
    GPU              ███ ███ ███ ███ ███ ███
    phase       [M(first call) ................. M(end of last call)]

GPU work launched during the range by *any* thread of the same process counts (autograd and
DDP launch from threads of their own). Library ranges (NCCL's NVTX domain, c10d ``nccl:*``
record_functions, cuBLAS/cuDNN/TensorRT domains, the profiler's and PyTorch's own markers)
stay visible as rows but are not phases. ``family`` folds repeated names for display.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from gaplens.analysis.busy import compute_busy, gpu_work
from gaplens.analysis.memo import per_trace
from gaplens.loaders.model import Kind, LaneKind, Trace, segmented_max

#: Ranges written by libraries, the profiler or PyTorch itself: rows, never phases.
LIBRARY_RANGE = re.compile(
    r"^(?:ProfilerStep#\d+|PyTorch Profiler.*"  # the profiler's own step markers
    r"|(?:nccl|gloo|mpi|ucc|c10d|record_param_comms)\b.*"  # c10d collectives: nccl:all_reduce
    r"|(?:NCCL|NVSHMEM|NVTX|CUBLAS|cuBLAS|cuBLASLt|CUDNN|cuDNN|TensorRT|TRT|MPI|UCX|NVSHMEM|cuFFT|CUFFT|"
    r"cuSPARSE|cuSOLVER|NVJPEG|DALI|OpenMP|omp)\s*:.*"  # nsys: a library's NVTX domain prefixes the name
    r"|Optimizer\.(?:step|zero_grad)#.*|DistributedDataParallel\.\w+|## .* ##"  # PyTorch's own markers
    r"|Torch-Compiled Region.*|CompiledFunction.*|TorchDynamo.*)$",
    re.IGNORECASE,
)
_NUMBERED = re.compile(r"^(?P<prefix>.*?)[\s#_.:-]*(?P<n>\d+)(?P<suffix>\s*\(.*\))?$")


def is_library_range(name: str) -> bool:
    return LIBRARY_RANGE.match(name.strip()) is not None


def family(name: str) -> str:
    """The name with its trailing count dropped: ``decode_step 7`` → ``decode_step``.

    Only a trailing number (or one before a parenthesised tag) is a count; ``1F1B`` and
    ``all2all_data`` stay as they are.
    """
    m = _NUMBERED.match(name.strip())
    if m is None or not m.group("prefix"):
        return name.strip()
    return (m.group("prefix") + (m.group("suffix") or "")).strip()


@dataclass(frozen=True)
class Phase:
    name: str
    host_start_ns: int
    host_end_ns: int
    start_ns: int  # GPU-side span (marker semantics)
    end_ns: int
    depth: int
    event: int  # index of the annotation event
    pid: int = -1  # the process whose thread opened the range
    device: int | None = None  # the device its work ran on; None when it ran no GPU work
    lane: int = -1  # the stream lane its span was timed on (its process's busiest when it ran nothing)

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


class MarkerClock:
    """M(t) per stream: when a marker enqueued on the host at t would run on that stream.

    A phase is timed on the stream that ran most of the work its process launched during the
    range (the stream its CUDA events were recorded on), else on its process's busiest stream.
    """

    def __init__(self, trace: Trace) -> None:
        idx = gpu_work(trace)
        launch = trace.launch[idx]
        queued = np.where(launch >= 0, trace.start_ns[np.maximum(launch, 0)], trace.start_ns[idx])
        lane = trace.lane[idx].astype(np.int64)
        pid_of_lane = np.asarray([ln.pid for ln in trace.lanes] or [-1], dtype=np.int64)
        # The process that launched each op (-1 when its launch was not traced).
        pid = np.where(launch >= 0, pid_of_lane[trace.lane[np.maximum(launch, 0)]], -1)
        order = np.lexsort((queued, lane))
        self.lane, self.queued = lane[order], queued[order]
        ends = trace.end_ns[idx][order]
        first = np.ones(self.lane.size, dtype=bool)
        first[1:] = self.lane[1:] != self.lane[:-1]
        self.reach = segmented_max(ends, first) if ends.size else ends
        self.lanes = self.lane[first]
        self.bounds = np.r_[np.flatnonzero(first), self.lane.size]
        # The same ops grouped by (launching process, lane), to pick a phase's stream.
        order = np.lexsort((queued, lane, pid))
        self._pid, self._lane, self._queued = pid[order], lane[order], queued[order]
        head = np.ones(order.size, dtype=bool)
        head[1:] = (self._pid[1:] != self._pid[:-1]) | (self._lane[1:] != self._lane[:-1])
        self._heads = np.flatnonzero(head)
        self._group_bounds = np.r_[self._heads, order.size]
        dur = (trace.end_ns[idx] - trace.start_ns[idx])[order]
        self._group_busy = np.add.reduceat(dur, self._heads) if order.size else np.zeros(0)

    def stream_for(self, pid: int, t0: int, t1: int) -> tuple[int, int]:
        """(lane, ops) of the lane that ran most ops ``pid`` queued during [t0, t1); (busiest lane, 0) if none."""
        best, best_count, busiest, busiest_ns = -1, 0, -1, -1.0
        for k, h in enumerate(self._heads.tolist()):
            if self._pid[h] != pid:
                continue
            lo, hi = int(self._group_bounds[k]), int(self._group_bounds[k + 1])
            seg = self._queued[lo:hi]
            count = int(np.searchsorted(seg, t1, "left") - np.searchsorted(seg, t0, "left"))
            lane = int(self._lane[h])
            if count > best_count:
                best, best_count = lane, count
            if self._group_busy[k] > busiest_ns:
                busiest, busiest_ns = lane, float(self._group_busy[k])
        return (best, best_count) if best_count else (busiest, 0)

    def at(self, lane: int, t: int) -> int:
        hit = np.flatnonzero(self.lanes == lane)
        if hit.size == 0:
            return t
        lo, hi = int(self.bounds[hit[0]]), int(self.bounds[hit[0] + 1])
        k = lo + int(np.searchsorted(self.queued[lo:hi], t, "left"))  # work queued at t is not yet done at t
        return max(t, int(self.reach[k - 1])) if k > lo else t


@per_trace
def phases(trace: Trace) -> list[Phase]:
    """The user's ranges on host threads, in start order, each with its GPU span, process and device.

    Cached while the trace lives: callers must not modify the list.
    """
    idx = np.flatnonzero(trace.kind == int(Kind.ANNOTATION))
    if idx.size == 0:
        return []
    library = np.zeros(len(trace.names), dtype=bool)
    used = np.unique(trace.name_id[idx])
    library[used] = [is_library_range(trace.names[int(i)]) for i in used.tolist()]
    idx = idx[~library[trace.name_id[idx]]]
    clock = MarkerClock(trace)
    own, launches = _calls(trace)
    out = []
    for i in idx[np.argsort(trace.start_ns[idx], kind="stable")].tolist():
        ln = trace.lanes[int(trace.lane[i])]
        s, e = int(trace.start_ns[i]), int(trace.end_ns[i])
        # The device learns of a phase at its first CUDA call and is done with it when the
        # work queued by its last call finishes; host time before/after is not GPU time.
        first, last = e, s
        for starts, ends in (own.get((ln.pid, ln.tid), _NONE), launches.get(ln.pid, _NONE)):
            if starts is None or ends is None:
                continue
            lo, hi = np.searchsorted(starts, s, "left"), np.searchsorted(starts, e, "right")
            if hi > lo:
                first, last = min(first, int(starts[lo])), max(last, min(e, int(ends[lo:hi].max())))
        a, b = (first, last) if first <= last else (s, e)
        lane, n_ops = clock.stream_for(ln.pid, s, e)
        device = trace.lanes[lane].device if n_ops and lane >= 0 else None
        name = trace.names[int(trace.name_id[i])]
        start, end = clock.at(lane, a), clock.at(lane, b)
        out.append(Phase(name, s, e, start, end, int(trace.depth[i]), i, ln.pid, device, lane))
    return out


_NONE: tuple[None, None] = (None, None)


def _calls(trace: Trace) -> tuple[dict, dict]:
    """Sorted (start, end) of CUDA calls: every call per thread, and the work-launching calls per process.

    A range counts every call of its own thread, and the calls of the process's other threads
    that queued GPU work (autograd's launches do; the NCCL watchdog's event queries do not).
    """
    api = np.flatnonzero(trace.kind == int(Kind.CUDA_API))
    own: dict = {}
    launches: dict = {}
    if api.size == 0:
        return own, launches
    launched = np.zeros(len(trace), dtype=bool)
    launched[trace.launch[trace.launch >= 0]] = True
    for ln in trace.lanes:
        if ln.kind != LaneKind.CUDA_API:
            continue
        sl = trace.lane_events(ln.id)
        starts, ends = trace.start_ns[sl], trace.end_ns[sl]
        order = np.argsort(starts, kind="stable")
        own[(ln.pid, ln.tid)] = (starts[order], ends[order])
        m = launched[sl]
        prev_s, prev_e = launches.get(ln.pid, (np.empty(0, np.int64), np.empty(0, np.int64)))
        launches[ln.pid] = (np.concatenate((prev_s, starts[m])), np.concatenate((prev_e, ends[m])))
    for p, (starts, ends) in launches.items():
        order = np.argsort(starts, kind="stable")
        launches[p] = (starts[order], ends[order])
    return own, launches


def phase_busy_pct(trace: Trace, phase: Phase) -> float:
    """Compute busy share of a phase's GPU span on the device it was timed on (communication is waiting)."""
    return float(phases_busy_pct(trace, [phase])[0])


def phases_busy_pct(trace: Trace, found: list[Phase]) -> np.ndarray:
    """``phase_busy_pct`` of many phases: one binary search per device, not per phase (a long
    capture has thousands of steps, and summary, its families and the protocol read them all)."""
    out = np.zeros(len(found))
    timed = [k for k, p in enumerate(found) if p.dur_ns > 0 and p.lane >= 0]
    if not timed:
        return out
    idx = np.asarray(timed, np.int64)
    device = np.asarray([trace.lanes[found[k].lane].device for k in timed], np.int64)
    t0 = np.asarray([found[k].start_ns for k in timed], np.int64)
    t1 = np.asarray([found[k].end_ns for k in timed], np.int64)
    for dev in np.unique(device).tolist():
        m = device == dev
        busy = compute_busy(trace, dev)
        out[idx[m]] = 100.0 * (busy.busy_before(t1[m]) - busy.busy_before(t0[m])) / (t1[m] - t0[m])
    return out


def innermost(found: list[Phase], t0: int, t1: int) -> Phase | None:
    """The deepest phase that holds [t0, t1): covering at least half of it on its GPU or host span.

    Failing that, the one overlapping it most; ``t0 == t1`` asks for the phase holding an instant.
    """
    best, best_key = None, None
    for p in found:
        overlap = max(min(p.end_ns, t1) - max(p.start_ns, t0), min(p.host_end_ns, t1) - max(p.host_start_ns, t0))
        holds = p.start_ns <= t0 < p.end_ns or p.host_start_ns <= t0 < p.host_end_ns
        if overlap <= 0 and not holds:
            continue
        key = (2 * overlap >= (t1 - t0) or (t1 == t0 and holds), p.depth, overlap)
        if best_key is None or key > best_key:
            best, best_key = p, key
    return best


def chain(found: list[Phase], inner: Phase) -> list[Phase]:
    """The phases enclosing ``inner`` in its process, outermost first, ending with it."""
    out = [
        p
        for p in found
        if p.pid == inner.pid and p.host_start_ns <= inner.host_start_ns and inner.host_end_ns <= p.host_end_ns
    ]
    return sorted(out, key=lambda p: p.depth)


def by_process(found: list[Phase]) -> dict[int, list[Phase]]:
    """Phases grouped by their process (start order inside each), processes in order of first phase."""
    out: dict[int, list[Phase]] = {}
    for p in found:
        out.setdefault(p.pid, []).append(p)
    return out
