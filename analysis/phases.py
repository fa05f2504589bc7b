"""Phases: the user's own ranges, placed on the GPU timeline as CUDA events would see them.

A phase is a host range [s, e] on one thread of one process. Its GPU span is where a marker
enqueued at s and at e would execute on the device: M(t) = max(t, end of every GPU op queued
on that stream before t). That is what ``torch.cuda.Event`` timing measures, so it is
comparable to ground truth, and it needs no GPU-side annotation (nsys has none).

    main thread |--- backward (loss.backward() blocks) ---|
    autograd       cudaLaunchKernel ▕▏▕▏▕▏▕▏▕▏▕▏            <- same process, another thread
    GPU              ███ ███ ███ ███ ███ ███
    phase       [M(start) ...................... M(end)]   M(end): the last work queued before end is done

GPU work launched during the range by *any* thread of the same process counts (autograd and
DDP launch from threads of their own): it picks the stream, and M counts everything queued on it.
So a parent is never shorter than a child timed on the same stream, and a range the host spends
waiting (a sleep, a data fetch) has its full length. A process that queued no GPU work has no
GPU span: its phases are host-only (device None, lane -1, the host span).

Library ranges (NCCL's NVTX domain, c10d ``nccl:*`` record_functions, cuBLAS/cuDNN/TensorRT
domains) and PyTorch's own markers (``PYTORCH_MARKERS``) stay visible as rows but are not phases.
``family`` (``analysis.step_names``) folds repeated names for display.
"""

from __future__ import annotations

import collections
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from gaplens.analysis.busy import compute_busy, device_splits, gpu_work
from gaplens.analysis.memo import per_trace
from gaplens.analysis.step_names import PROFILER_STEP
from gaplens.analysis.step_names import family as family  # display folding: one count pattern (step_names.NUMBERED)
from gaplens.analysis.waits import event_wait_rows
from gaplens.loaders.model import Kind, Trace
from gaplens.loaders.rows import segmented_max

#: PyTorch's own automatic markers (DESIGN.md, *Phases*): rows, never phases. Real names:
#: ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``, ``Optimizer.step#SGD.step``,
#: ``Optimizer.zero_grad#SGD.zero_grad``, ``DistributedDataParallel.forward``,
#: ``autograd::engine::evaluate_function: AddmmBackward0``, ``## forward ##`` (record_function
#: scopes that torchrec/DPER and DDP wrap around their own stages), and ``ProfilerStep#12``, which
#: is the step marker only (``analysis.steps``).
PYTORCH_MARKERS = (
    r"enumerate\(DataLoader\)#.*",
    r"Optimizer\.step#.*",
    r"Optimizer\.zero_grad#.*",
    r"DistributedDataParallel\..*",
    r"autograd::.*",
    r"## .* ##",
    PROFILER_STEP.pattern.strip("^$"),  # the step marker (one pattern, analysis.step_names)
    r"PyTorch Profiler.*",
    r"Torch-Compiled Region.*",
    r"CompiledFunction.*",
    r"TorchDynamo.*",
)
#: Libraries' ranges: c10d collectives (``nccl:all_reduce``) and the NVTX domains nsys prefixes names with.
LIBRARY_RANGES = (
    r"(?:nccl|gloo|mpi|ucc|c10d|record_param_comms)\b.*",
    r"(?:NCCL|NVSHMEM|NVTX|CUBLAS|cuBLAS|cuBLASLt|CUDNN|cuDNN|TensorRT|TRT|MPI|UCX|cuFFT|CUFFT|"
    r"cuSPARSE|cuSOLVER|NVJPEG|DALI|OpenMP|omp)\s*:.*",
)
#: Host calls that make a stream wait for an event recorded on another (CUDA runtime/driver, HIP).
STREAM_WAIT = re.compile(r"^(cuda|cu|hip)StreamWaitEvent", re.IGNORECASE)
#: Ranges written by libraries, the profiler or PyTorch itself: rows, never phases.
LIBRARY_RANGE = re.compile(r"^(?:" + "|".join(PYTORCH_MARKERS + LIBRARY_RANGES) + r")$", re.IGNORECASE)
_PYTORCH_MARKER = re.compile(r"^(?:" + "|".join(PYTORCH_MARKERS) + r")$")


def is_library_range(name: str) -> bool:
    """A library's, the profiler's or PyTorch's own range: shown as a row, never a phase."""
    return LIBRARY_RANGE.match(name.strip()) is not None


def is_pytorch_marker(name: str) -> bool:
    """One of PyTorch's own automatic markers (``PYTORCH_MARKERS``)."""
    return _PYTORCH_MARKER.match(name.strip()) is not None


@dataclass(frozen=True, slots=True)
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


#: Phase's integer fields, in order, as ``PhaseList`` keeps them in columns.
_INT_FIELDS = ("host_start_ns", "host_end_ns", "start_ns", "end_ns", "depth", "event", "pid", "lane")
#: Phase's fields in its own order (``device`` before ``lane``), as ``PhaseList._fill`` sets them.
_FIELDS = ("name", *_INT_FIELDS[:-1], "device", "lane")
_NAME = attrgetter("name")


def _int_columns(found: list[Phase], fields: tuple[str, ...]) -> np.ndarray:
    """(phases, fields) int64 matrix of integer fields, read in C (``attrgetter``; no Python loop per phase)."""
    if len(fields) == 1:
        return np.fromiter(map(attrgetter(fields[0]), found), np.int64, len(found)).reshape(-1, 1)
    rows = map(attrgetter(*fields), found)
    flat = np.fromiter(itertools.chain.from_iterable(rows), np.int64, len(found) * len(fields))
    return flat.reshape(len(found), len(fields))


class PhaseList(list):
    """``phases``' list, pickled as columns (kept readings): a framework's NVTX range per layer per step is
    100k phases, and pickling them one object at a time cost ~2.4M calls of the keeper's allowlist check."""

    _ints: np.ndarray | None = None  # (n, len(_INT_FIELDS)) columns it was built from, when it was
    _device: np.ndarray | None = None  # device per phase, -1 for None
    _span_cols: tuple[np.ndarray, ...] | None = None  # ``_span_columns``, built on first use
    _labels: tuple[int, dict[str, str]] | None = None  # ``family_labels``, built on first use
    _index: _SpanIndex | None = None  # ``_span_index``, built on first use

    def _columns(self) -> tuple[np.ndarray, np.ndarray]:
        if self._ints is not None and self._device is not None and self._ints.shape[0] == len(self):
            return self._ints, self._device
        device = np.asarray([-1 if p.device is None else p.device for p in self], np.int64)
        return _int_columns(self, _INT_FIELDS), device

    def __reduce__(self):
        ints, device = self._columns()
        return PhaseList, (), ([p.name for p in self], ints, device)

    def __setstate__(self, state: tuple[list[str], np.ndarray, np.ndarray]) -> None:
        names, ints, device = state
        self._fill(names, ints, device)

    def _fill(self, names: list[str], ints: np.ndarray, device: np.ndarray) -> None:
        """Build the phases from columns, keeping the columns for ``_span_columns`` and pickling.

        Each Phase is made without its frozen ``__init__`` (ten ``object.__setattr__`` per phase were half the
        time 100k NVTX phases took to build or to read back): the objects first, then each field's column set
        through its slot, a C loop per field (a dict per phase, filled in Python, took twice as long).
        """
        ints = ints.reshape(-1, len(_INT_FIELDS)).astype(np.int64, copy=False)
        device = device.astype(np.int64, copy=False)
        cols = [c.tolist() for c in ints.T]
        devs = [None if d < 0 else d for d in device.tolist()]
        out = list(map(object.__new__, itertools.repeat(Phase, len(names))))
        for name, column in zip(_FIELDS, (names, *cols[:-1], devs, cols[-1]), strict=True):
            collections.deque(map(getattr(Phase, name).__set__, out, column), maxlen=0)
        self[:] = out
        self._ints, self._device = ints, device
        self._span_cols = tuple(np.ascontiguousarray(ints[:, k]) for k in (2, 3, 0, 1, 4))


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
        # A stream wait queued on a stream holds everything queued after it until the awaited op ends:
        # a zero-length marker of its own (round-3 dependency: b_after_wait opens after its stream was
        # told to wait for a_chain1; CUDA events there read 2.26 ms, the span without the wait 5.88 ms).
        w_lane, w_queued, w_end = _waits(trace, idx)
        order = np.lexsort((np.r_[queued, w_queued], np.r_[lane, w_lane]))
        self.lane, self.queued = np.r_[lane, w_lane][order], np.r_[queued, w_queued][order]
        ends = np.r_[trace.end_ns[idx], w_end][order]
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
        self._by_pid: dict[int, list[tuple[int, np.ndarray]]] | None = None  # ``_groups``, built on first use
        self._busiest_lane: dict[int, int] | None = None  # ``_busiest``, built on first use

    def stream_for(self, pid: int, t0: int, t1: int) -> tuple[int, int]:
        """(lane, ops) of the lane that ran most ops ``pid`` queued during [t0, t1); (busiest lane, 0) if none."""
        best, best_count = -1, 0
        for lane, seg in self._groups().get(pid, ()):
            count = int(np.searchsorted(seg, t1, "left") - np.searchsorted(seg, t0, "left"))
            if count > best_count:  # strictly more: the first group with the most wins
                best, best_count = lane, count
        return (best, best_count) if best_count > 0 else (self._busiest().get(pid, -1), 0)

    def _groups(self) -> dict[int, list[tuple[int, np.ndarray]]]:
        """Per launching process, its (lane, queue times) groups in (process, lane) order; built once."""
        if self._by_pid is None:
            self._by_pid = {}
            for k, h in enumerate(self._heads.tolist()):
                seg = self._queued[int(self._group_bounds[k]) : int(self._group_bounds[k + 1])]
                self._by_pid.setdefault(int(self._pid[h]), []).append((int(self._lane[h]), seg))
        return self._by_pid

    def _busiest(self) -> dict[int, int]:
        """Per launching process, the lane its ops kept busiest (the first such group wins ties)."""
        if self._busiest_lane is None:
            busiest: dict[int, tuple[int, float]] = {}
            for k, h in enumerate(self._heads.tolist()):
                p, lane = int(self._pid[h]), int(self._lane[h])
                if self._group_busy[k] > busiest.get(p, (-1, -1.0))[1]:
                    busiest[p] = (lane, float(self._group_busy[k]))
            self._busiest_lane = {p: lane for p, (lane, _) in busiest.items()}
        return self._busiest_lane

    def stream_for_each(self, pid: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``stream_for`` of many ranges: one pass per (process, stream) group, vectorised over the ranges
        (an NVTX range per layer per step is 100k ranges; asking one at a time took seconds)."""
        pid = np.asarray(pid, np.int64)
        best = np.full(pid.size, -1, np.int64)
        best_count = np.zeros(pid.size, np.int64)
        for p, groups in self._groups().items():
            m = np.flatnonzero(pid == p)
            if m.size == 0:
                continue
            for lane, seg in groups:
                count = np.searchsorted(seg, t1[m], "left") - np.searchsorted(seg, t0[m], "left")
                more = count > best_count[m]  # strictly more: the first group with the most wins, as before
                best[m[more]], best_count[m[more]] = lane, count[more]
        busiest = self._busiest()
        procs, inverse = np.unique(pid, return_inverse=True)  # each process looked up once, not each range
        fallback = np.asarray([busiest.get(p, -1) for p in procs.tolist()], np.int64)[inverse.reshape(-1)]
        return np.where(best_count > 0, best, fallback), best_count

    def at(self, lane: int, t: int) -> int:
        return int(self.at_each(np.asarray([lane]), np.asarray([t]))[0])

    def at_each(self, lane: np.ndarray, t: np.ndarray) -> np.ndarray:
        """M(t) on each lane: one binary search per distinct lane, vectorised over the times."""
        t = np.asarray(t, np.int64)
        out = t.copy()
        for ln in np.unique(lane).tolist():
            hit = np.flatnonzero(self.lanes == ln)
            if hit.size == 0:
                continue
            m = np.flatnonzero(lane == ln)
            lo, hi = int(self.bounds[hit[0]]), int(self.bounds[hit[0] + 1])
            k = lo + np.searchsorted(self.queued[lo:hi], t[m], "left")  # work queued at t is not yet done at t
            done = k > lo
            out[m[done]] = np.maximum(t[m[done]], self.reach[k[done] - 1])
        return out


def _waits(trace: Trace, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(waiting stream lane, host time the wait was queued, when it cleared) per stream wait.

    Recorded waits (``analysis.waits``) name both streams: the wait clears when the awaited op
    ends. A Kineto trace without ``cuda_sync`` activity has only the host's ``cudaStreamWaitEvent``
    calls: the waiting stream is the one the same thread launches on next, and the wait cleared
    when that op started, if it started later than its launch and its stream's earlier work allow
    (held by the wait); a wait that held nothing adds nothing.
    """
    dst, src, row = event_wait_rows(trace, ops)
    if dst.size:
        call = trace.launch[row]
        t_wait = np.where(call >= 0, trace.start_ns[np.maximum(call, 0)], trace.start_ns[row])
        return trace.lane[dst].astype(np.int64), t_wait.astype(np.int64), trace.end_ns[src].astype(np.int64)
    return _wait_calls_held(trace, ops)


def _wait_calls_held(trace: Trace, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    none = (np.empty(0, np.int64),) * 3
    api = np.flatnonzero(trace.kind == int(Kind.CUDA_API))
    if api.size == 0:
        return none
    ids, inv = np.unique(trace.name_id[api], return_inverse=True)
    is_wait = np.asarray([STREAM_WAIT.search(trace.names[int(i)]) is not None for i in ids.tolist()], bool)
    calls = api[is_wait[inv.reshape(-1)]]
    launched = ops[trace.launch[ops] >= 0]
    if calls.size == 0 or launched.size == 0:
        return none
    # Launches keyed by (thread lane, launch start): the first launch of the waiting thread after each wait.
    a = trace.launch[launched]
    key_lane, key_t = trace.lane[a].astype(np.int64), trace.start_ns[a].astype(np.int64)
    order = np.lexsort((key_t, key_lane))
    key_lane, key_t, op_sorted = key_lane[order], key_t[order], launched[order]
    c_lane, c_t = trace.lane[calls].astype(np.int64), trace.start_ns[calls].astype(np.int64)
    lo = int(min(key_t.min(), c_t.min()))
    span = int(max(key_t.max(), c_t.max())) - lo + 1
    k = np.searchsorted(key_lane * span + (key_t - lo), c_lane * span + (c_t - lo), "left")
    kk = np.minimum(k, op_sorted.size - 1)
    hit = (k < op_sorted.size) & (key_lane[kk] == c_lane)
    op = op_sorted[kk[hit]]
    t_wait = c_t[hit]
    # Held by the wait: the op started after its launch call ended and after its stream's earlier work.
    lane = trace.lane[op].astype(np.int64)
    launch_end = trace.end_ns[trace.launch[op]]
    prev = op - 1  # events of a lane are stored together, in start order
    same = (prev >= 0) & (trace.lane[np.maximum(prev, 0)] == trace.lane[op])
    prev_end = np.where(same, trace.end_ns[np.maximum(prev, 0)], np.iinfo(np.int64).min)
    held = trace.start_ns[op] > np.maximum(launch_end, prev_end)
    return lane[held], t_wait[held], trace.start_ns[op][held].astype(np.int64)


@per_trace
def marker_clock(trace: Trace) -> MarkerClock:
    """The trace's ``MarkerClock``, built once while the trace lives."""
    return MarkerClock(trace)


def marker_span(trace: Trace, pid: int, s: int, e: int) -> tuple[int, int, int, int | None]:
    """(start, end, lane, device) of a host range [s, e] of process ``pid`` as CUDA events would time it.

    The span is M(s)..M(e) on the stream that ran most of the work the process queued during the
    range (from any of its threads), else on its busiest stream; ``device`` is None when it queued
    no work then. A process that queued no GPU work at all has no stream: its span is the host's
    (lane -1).
    """
    clock = marker_clock(trace)
    lane, n_ops = clock.stream_for(pid, s, e)
    device = trace.lanes[lane].device if n_ops and lane >= 0 else None
    return clock.at(lane, s), clock.at(lane, e), lane, device


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
    idx = idx[np.argsort(trace.start_ns[idx], kind="stable")]
    # marker_span for every range at once (the same rule, vectorised)
    pid = np.asarray([ln.pid for ln in trace.lanes], np.int64)[trace.lane[idx]]
    s, e = trace.start_ns[idx], trace.end_ns[idx]
    clock = marker_clock(trace)
    lane, n_ops = clock.stream_for_each(pid, s, e)
    start, end = clock.at_each(lane, s), clock.at_each(lane, e)
    lane_device = np.asarray([ln.device for ln in trace.lanes] or [-1], np.int64)
    has = (n_ops > 0) & (lane >= 0)
    names = trace.names
    out = PhaseList()
    ints = np.stack([s, e, start, end, trace.depth[idx], idx, pid, lane], axis=1)  # _INT_FIELDS' order
    device = np.where(has, lane_device[np.maximum(lane, 0)], -1)
    out._fill([names[n] for n in trace.name_id[idx].tolist()], ints, device)
    return out


def phase_busy_pct(trace: Trace, phase: Phase) -> float:
    """Compute busy share of a phase's GPU span on the device it was timed on (communication is waiting)."""
    return float(phases_busy_pct(trace, [phase])[0])


def phases_busy_pct(trace: Trace, found: list[Phase]) -> np.ndarray:
    """``phase_busy_pct`` of many phases: one binary search per device, not per phase (a long
    capture has thousands of steps, and summary, its families and the protocol read them all)."""
    out = np.zeros(len(found))
    idx, device, t0, t1 = _timed(trace, found)
    for dev in np.unique(device).tolist():
        m = device == dev
        busy = compute_busy(trace, dev)
        out[idx[m]] = 100.0 * (busy.busy_before(t1[m]) - busy.busy_before(t0[m])) / (t1[m] - t0[m])
    return out


def phases_busy_ns(trace: Trace, found: list[Phase], part: str = "compute") -> np.ndarray:
    """``span_busy_ns`` of one class of GPU work (a field of ``busy.Split``) in each phase's GPU span, on the
    device it was timed on; 0 for an empty span or a host-only phase. All phases at once: step 3 asked for
    the copies of each of 92k nested NVTX phases one at a time (2.7 s)."""
    out = np.zeros(len(found), np.int64)
    idx, device, t0, t1 = _timed(trace, found)
    splits = device_splits(trace)
    for dev in np.unique(device).tolist():
        if dev not in splits:
            continue
        m = device == dev
        spans = getattr(splits[dev], part)
        out[idx[m]] = spans.busy_before(t1[m]) - spans.busy_before(t0[m])
    return out


def _timed(trace: Trace, found: list[Phase]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(index, device of its lane, start, end) of the phases with a GPU span to read: non-empty, on a stream."""
    s, e = _span_columns(found)[:2]
    lane = int_column(found, "lane")
    idx = np.flatnonzero((e - s > 0) & (lane >= 0))
    lane_device = np.asarray([-1 if ln.device is None else ln.device for ln in trace.lanes] or [-1], np.int64)
    return idx, lane_device[lane[idx]], s[idx], e[idx]


def int_column(found: list[Phase], field: str) -> np.ndarray:
    """One integer field of every phase: a PhaseList's own column, else read from the phases."""
    ints = getattr(found, "_ints", None)
    if ints is not None and ints.shape[0] == len(found):
        return ints[:, _INT_FIELDS.index(field)]
    return _int_columns(found, (field,)).reshape(-1)


def span_durations(found: list[Phase]) -> np.ndarray:
    """Each phase's ``dur_ns`` (its GPU span's length) from the span columns, not one property call per phase."""
    s, e = _span_columns(found)[:2]
    return e - s


def process_order(found: list[Phase]) -> list[int]:
    """The processes of ``found`` in order of their first phase: ``by_process``'s keys, without its lists."""
    if not found:
        return []
    pid = int_column(found, "pid")
    values, first = np.unique(pid, return_index=True)
    return values[np.argsort(first, kind="stable")].tolist()


def family_labels(found: list[Phase]) -> dict[str, str]:
    """Each phase name's display family: ``family(name)`` when the folded name holds several
    distinct names (``decode_step 0``, ``decode_step 1``, ...), else the name itself. One name
    repeated is not a numbered family: round-3 floor_calib's six ``gemm_bf16_8192`` ranges read
    "gemm_bf16 ×6", a rewritten name (8192 is a size, not a count)."""
    cached = getattr(found, "_labels", None)
    if cached is not None and cached[0] == len(found):
        return cached[1]
    names: dict[str, set[str]] = {}
    for n in dict.fromkeys(p.name for p in found):  # each name once, in order of first appearance
        names.setdefault(family(n), set()).add(n)
    out = {n: fam if len(members) > 1 else n for fam, members in names.items() for n in members}
    if isinstance(found, PhaseList):
        found._labels = (len(found), out)
    return out


def fold_families(found: list[Phase], by_depth: bool = False) -> dict[tuple, list[int]]:
    """Indices into ``found`` per display family (``family_labels``), in order of first appearance,
    keyed ``(pid, label)`` or, ``by_depth``, ``(pid, depth, label)``: phases of different processes never
    fold together. The one roll-up of phases into families: summary, the walkthrough and the report."""
    if not found:
        return {}
    label = family_labels(found)
    names = list(map(_NAME, found))
    name_code = {n: k for k, n in enumerate(dict.fromkeys(names))}  # in order of first appearance
    labels: dict[str, int] = {}  # label -> code, in order of first appearance
    label_of_name = np.asarray([labels.setdefault(label[n], len(labels)) for n in name_code], np.int64)
    code = label_of_name[np.fromiter(map(name_code.__getitem__, names), np.int64, len(names))]
    key = code  # (pid, [depth,] label) as one number, kept dense (below the phases' count) so it never overflows
    for col in (_span_columns(found)[4], int_column(found, "pid"))[0 if by_depth else 1 :]:
        dense = np.unique(col, return_inverse=True)[1].reshape(-1)
        key = np.unique(dense * (int(key.max()) + 1) + key, return_inverse=True)[1].reshape(-1)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)  # groups in order of first appearance
    group = rank[inverse]
    order = np.argsort(group, kind="stable")  # members in list order within each group
    bounds = np.r_[0, np.cumsum(np.bincount(group, minlength=first.size))]
    out: dict[tuple, list[int]] = {}
    for g, k in enumerate(np.sort(first).tolist()):
        p = found[k]
        fam = label[p.name]
        out[(p.pid, p.depth, fam) if by_depth else (p.pid, fam)] = order[bounds[g] : bounds[g + 1]].tolist()
    return out


def family_pct(member_pct: np.ndarray | list[float], member_ns: np.ndarray | list[int]) -> float:
    """A family's share (busy %, ...) from its members': each weighted by its span, so ``decode_step ×64``
    reads the share of the time its steps took, not the mean of 64 numbers. A zero-length member weighs
    1 ns (a family of empty spans reads its members' mean)."""
    return float(np.average(np.asarray(member_pct, float), weights=np.maximum(np.asarray(member_ns, np.int64), 1)))


def innermost(found: list[Phase], t0: int, t1: int) -> Phase | None:
    """The deepest phase that holds [t0, t1): covering at least half of it on its GPU or host span.

    Failing that, the one overlapping it most; ``t0 == t1`` asks for the phase holding an instant.
    Ties go to the earlier phase in ``found``. One rule, in ``innermost_each``.
    """
    k = int(innermost_each(found, np.asarray([t0]), np.asarray([t1]))[0])
    return found[k] if k >= 0 else None


#: Queries x phases per block of the vectorised lookups: a few arrays of this many int64 (~32 MB each).
_LOOKUP_BLOCK = 1 << 22


def _span_columns(found: list[Phase]) -> tuple[np.ndarray, ...]:
    """(start, end, host start, host end, depth) columns; a ``PhaseList`` builds them once (the smells and the
    regions ask about the same 100k phases ~20 times: 0.8 s of per-phase tuples each cold open)."""
    cached = getattr(found, "_span_cols", None)
    if cached is not None and cached[0].size == len(found):
        return cached
    cols = _int_columns(found, ("start_ns", "end_ns", "host_start_ns", "host_end_ns", "depth"))
    out = tuple(np.ascontiguousarray(c) for c in cols.T)
    if isinstance(found, PhaseList):
        found._span_cols = out
    return out


def _blocks(n_queries: int, n_phases: int) -> Iterator[slice]:
    step = max(1, _LOOKUP_BLOCK // max(n_phases, 1))
    for a in range(0, n_queries, step):
        yield slice(a, min(a + step, n_queries))


#: Queries asked together, near in time, against the phases that come near them: the smells' findings
#: against 92k nested NVTX phases were 700 x 92k comparisons per column (4.7 s) where ~20 phases matter.
_NEAR_BLOCK = 64
#: A block whose queries x nearby phases pass this many cells asks each of its queries alone, against the phases
#: near that query only: one wide finding (a whole decode step over 100k layer ranges) made its 63 neighbours
#: compare themselves with every phase it spans (64 x 100k cells a column: ~0.1 s a block).
_NEAR_CELLS = 1 << 16
#: Share of the phases, the longest, that every query is checked against; the rest are found by binary search in
#: start order, at most the cut-off length before a query's start.
_LONG_SHARE = 0.01


class _SpanIndex:
    """Phases near an interval without a pass over all of them: per span (GPU, host), the starts in order and
    the longest ``_LONG_SHARE`` apart. A phase near [lo, hi] (s <= hi, e >= lo) that is not among the longest
    ends at most ``cut`` after its start, so it starts in [lo - cut, hi]: two binary searches."""

    def __init__(self, cols: tuple[np.ndarray, ...]) -> None:
        self.cols = cols[:4]
        self.parts = [self._part(s, e) for s, e in ((cols[0], cols[1]), (cols[2], cols[3]))]

    @staticmethod
    def _part(s: np.ndarray, e: np.ndarray) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        length = e - s
        keep = min(length.size - 1, int(length.size * (1 - _LONG_SHARE)))
        cut = max(int(np.partition(length, keep)[keep]), 0) if length.size else 0
        order = np.argsort(s, kind="stable")
        return cut, order, s[order], np.flatnonzero(length > cut)

    def near(self, lo: int, hi: int) -> np.ndarray:
        """Indices, ascending, of the phases whose GPU or host span comes near [lo, hi]: s <= hi and e >= lo."""
        found = []
        for (cut, order, starts, long), (s, e) in zip(self.parts, (self.cols[:2], self.cols[2:]), strict=True):
            a = int(np.searchsorted(starts, lo - cut, "left"))
            b = int(np.searchsorted(starts, hi, "right"))
            cand = np.concatenate([order[a:b], long])
            found.append(cand[(s[cand] <= hi) & (e[cand] >= lo)])
        return np.unique(np.concatenate(found))


def _span_index(found: list[Phase]) -> _SpanIndex:
    """The phases' ``_SpanIndex``; a ``PhaseList`` builds it once."""
    cached = getattr(found, "_index", None)
    if cached is not None and cached.cols[0].size == len(found):
        return cached
    out = _SpanIndex(_span_columns(found))
    if isinstance(found, PhaseList):
        found._index = out
    return out


def _near(found: list[Phase], t0: np.ndarray, t1: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(queries, phases) in blocks: each block of queries, near in time, with every phase whose GPU or host span
    comes near the block's stretch [A, B]: s <= B and e >= A (ends included). A phase outside that can neither
    overlap a query of the block nor hold one's instant, so leaving it out changes no answer; nor does leaving
    out, for a query asked alone, the phases near its block but not near itself."""
    index = _span_index(found)
    lo_q, hi_q = np.minimum(t0, t1), np.maximum(t0, t1)
    order = np.argsort(t0, kind="stable")
    for k in range(0, order.size, _NEAR_BLOCK):
        q = order[k : k + _NEAR_BLOCK]
        near = index.near(int(lo_q[q].min()), int(hi_q[q].max()))
        if q.size > 1 and q.size * near.size > _NEAR_CELLS:
            for j in q.tolist():
                yield np.asarray([j]), index.near(int(lo_q[j]), int(hi_q[j]))
            continue
        for blk in _blocks(q.size, near.size):
            yield q[blk], near


def innermost_each(found: list[Phase], t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """``innermost`` for many intervals at once: the index into ``found`` of each one's phase, or -1.

    The smells ask it for every finding and the regions for every gap: one Python loop over the
    phases per question was 0.3 s of a 1M-event trace's readings.
    """
    t0, t1 = np.asarray(t0, np.int64).reshape(-1), np.asarray(t1, np.int64).reshape(-1)
    out = np.full(t0.size, -1, np.int64)
    if not found or t0.size == 0:
        return out
    cols = _span_columns(found)
    for q, near in _near(found, t0, t1):
        if near.size == 0:
            continue
        s, e, hs, he, depth = (c[near] for c in cols)
        a, b = t0[q, None], t1[q, None]
        overlap = np.maximum(np.minimum(e, b) - np.maximum(s, a), np.minimum(he, b) - np.maximum(hs, a))
        holds = ((s <= a) & (a < e)) | ((hs <= a) & (a < he))
        cand = (overlap > 0) | holds
        # The scalar loop's key, compared lexicographically: (holds half or the instant, depth, overlap).
        first = (2 * overlap >= (b - a)) | ((b == a) & holds)
        keep = cand & (first >= np.where(cand, first, False).max(axis=1, keepdims=True))
        top = np.where(keep, depth, -1).max(axis=1, keepdims=True)
        keep &= depth == top
        low = np.iinfo(np.int64).min
        keep &= overlap == np.where(keep, overlap, low).max(axis=1, keepdims=True)
        got = keep.argmax(axis=1)  # the first phase in list order, as the loop keeps it on a tie
        out[q] = np.where(keep.any(axis=1), near[got], -1)
    return out


def holding_share_each(found: list[Phase], t0: np.ndarray, t1: np.ndarray, share: float) -> np.ndarray:
    """For each [t0, t1): does one phase's GPU or host span hold at least ``share`` of it?"""
    t0, t1 = np.asarray(t0, np.int64).reshape(-1), np.asarray(t1, np.int64).reshape(-1)
    out = np.zeros(t0.size, bool)
    if not found or t0.size == 0:
        return out
    cols = _span_columns(found)
    # Only a positive need keeps far phases out (an empty or reversed interval is held by any phase near it).
    wide = np.flatnonzero(share * (t1 - t0) > 0)
    narrow = np.setdiff1d(np.arange(t0.size), wide)
    blocks = [(wide[q], near) for q, near in _near(found, t0[wide], t1[wide])]
    blocks += [(narrow[blk], np.arange(len(found))) for blk in _blocks(narrow.size, len(found))]
    for q, near in blocks:
        if near.size == 0:
            continue
        s, e, hs, he = (c[near] for c in cols[:4])
        a, b = t0[q, None], t1[q, None]
        need = share * (b - a)
        gpu = np.minimum(e, b) - np.maximum(s, a) >= need
        host = np.minimum(he, b) - np.maximum(hs, a) >= need
        out[q] = (gpu | host).any(axis=1)
    return out


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
    if not found:
        return {}
    pid = int_column(found, "pid")
    if (pid == pid[0]).all():  # one process (the usual case): the list itself, copied
        return {found[0].pid: list(found)}
    _, first, inverse = np.unique(pid, return_index=True, return_inverse=True)
    order = np.argsort(inverse.reshape(-1), kind="stable")  # each process's phases together, in list order
    bounds = np.r_[0, np.cumsum(np.bincount(inverse.reshape(-1), minlength=first.size))]
    out: dict[int, list[Phase]] = {}
    for g in np.argsort(first, kind="stable").tolist():  # processes in order of their first phase
        out[found[int(first[g])].pid] = [found[k] for k in order[bounds[g] : bounds[g + 1]].tolist()]
    return out
