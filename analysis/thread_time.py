"""What the launching thread did during a blank region: its time split into sync, alloc, copy, launch, host.

Per thread that made CUDA calls, the time at each class is a union with prefix sums (``ThreadTime``),
so every region splits at once; ``analysis.causes`` weighs the split against what the device showed.
Every instant falls in the strongest class that covers it:

    sync    inside a synchronising call (or the innermost CPU op that makes one: ``.item()``)
    alloc   inside a memory-management call (cudaMalloc, cudaFree, cudaHostAlloc, their HIP twins)
    copy    inside a copy call (or a CPU op that makes one: ``.to("cuda")``)
    launch  inside a launch call, or a short CPU op that issues one (dispatch overhead)
    host    anything else: Python, CPU ops with no CUDA calls, slow CPU ops, untraced time

A CPU op longer than ``DISPATCH_MAX_NS`` that launches work is host work, not launch overhead:
a first-call GEMM that spends 2 ms loading its module is a host island, not a picket fence.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gaplens.analysis.busy import BusySpans, copy_mask, gpu_work
from gaplens.analysis.calls import Call, api_class, first_call_launches
from gaplens.analysis.memo import per_trace
from gaplens.loaders.model import Kind, LaneKind, Trace

#: A CPU op that issues GPU work and runs longer than this is host work, not dispatch overhead.
DISPATCH_MAX_NS = 100_000
THREAD_CLASSES = ("sync", "alloc", "copy", "launch", "host")
#: Host ranges and ops that are the input pipeline: the step thread waiting for (or making) its next batch.
#: Their time is ``host`` even after a sync: "feed the GPU ahead" (DataLoader workers, prefetch) is its lever.
INPUT_PIPELINE = re.compile(r"^enumerate\(DataLoader\)#|DataLoader.*__next__", re.IGNORECASE)


#: A thread's time levels, strongest first; each level is the union of its own intervals and every
#: stronger level's, so the time at exactly one level is a difference of two prefix-sum lookups.
LEVELS = ("sync", "alloc", "copy", "pipeline", "ahead_sync", "ahead_alloc", "launch")


@dataclass
class ThreadTime:
    """Covered time of one host thread at each level of ``LEVELS`` (cumulative unions)."""

    pid: int
    tid: int
    levels: dict[str, BusySpans]

    def split(self, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """(k, 5) time in sync, alloc, copy, launch, host (``THREAD_CLASSES``) for each interval [s, e)."""
        s = np.asarray(s, np.int64)
        e = np.asarray(e, np.int64)
        at = {lv: _covered(self.levels[lv], s, e) for lv in LEVELS}
        own = {lv: at[lv] - (at[LEVELS[k - 1]] if k else 0) for k, lv in enumerate(LEVELS)}
        sync = own["sync"] + own["ahead_sync"]
        alloc = own["alloc"] + own["ahead_alloc"]
        host = (e - s) - at["launch"] + own["pipeline"]
        return np.stack((sync, alloc, own["copy"], own["launch"], host), axis=1).clip(min=0)


def _covered(spans: BusySpans, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per interval [s, e): the time ``spans`` cover in it, B(e) - B(s) (``BusySpans.busy_before``).

    The same integers with one binary search and three lookups per bound: the spans behind a
    zero-length one at the smallest time, so every bound finds a span (B = 0 before the first).
    """
    lowest = np.iinfo(np.int64).min
    start = np.concatenate(([lowest], spans.start))
    end = np.concatenate(([lowest], spans.end))
    cum = np.concatenate(([0], spans.cum[:-1]))  # the time covered before each span

    def b(t: np.ndarray) -> np.ndarray:
        j = np.searchsorted(start, t, "right") - 1
        return cum[j] + (np.minimum(t, end[j]) - start[j])

    return b(e) - b(s)


@per_trace
def thread_times(trace: Trace) -> dict[tuple[int, int], ThreadTime]:
    """ThreadTime per (pid, tid) that made CUDA calls (cached while the trace lives).

    Per class, the intervals of the thread at that class or stronger:

    - sync: synchronising calls; the innermost CPU op that makes one (``.item()``'s
      ``_local_scalar_dense``, not the DataLoader step around it); the part of a blocking copy
      call before its copy started on the device (the host waited for earlier device work, e.g.
      ``hipMemcpyWithStream`` behind a ``hipStreamWaitEvent``);
    - copy: only time inside copy calls (never a CPU op that issued one: ``record_param_comms``
      issuing a DtoD copy is not copying): a blocking call from its copy's start, an asynchronous
      host<->device copy call whole; an asynchronous device-local (DtoD, peer) copy call is a launch;
    - alloc: memory-management calls (``Call.ALLOC``);
    - launch: launch calls, except memory management and module loading and a launch that loaded its
      kernel's module (``calls.module_loads``: warm-up host work);
      a short CPU op that makes any call that queues work (dispatch overhead);
    - pipeline: the input pipeline's ranges and ops (``INPUT_PIPELINE``): host time, never run-ahead;
    - ahead_sync / ahead_alloc: the run-ahead after a sync or memory-management call that waited for
      the device: the Python and the launch that follow it, up to the end of the next call that queues
      work and at most as long as the call waited (stronger than launch: that launch would have been
      made while the device still worked).
    """
    cls = api_class(trace)
    copy_op = copy_op_of_calls(trace, cls)
    warm = first_call_launches(trace)
    waited = call_waits(trace)
    pipeline = _pipeline_events(trace)
    by_thread: dict[tuple[int, int], dict[LaneKind, int]] = {}
    for ln in trace.lanes:
        if ln.kind in (LaneKind.CUDA_API, LaneKind.CPU_OPS, LaneKind.ANNOTATIONS):
            by_thread.setdefault((ln.pid, ln.tid), {})[ln.kind] = ln.id
    out = {}
    for key, lanes in by_thread.items():
        if LaneKind.CUDA_API not in lanes:
            continue
        sl = trace.lane_events(lanes[LaneKind.CUDA_API])
        api = np.arange(sl.start, sl.stop)
        a_s, a_e, a_c = trace.start_ns[sl], trace.end_ns[sl], cls[sl]  # views: a lane's events are contiguous
        ops = trace.lane_events(lanes[LaneKind.CPU_OPS]) if LaneKind.CPU_OPS in lanes else slice(0, 0)
        is_op = trace.kind[ops] == int(Kind.CPU_OP)
        pick = slice(None) if is_op.all() else is_op  # only CPU ops (no Python frames): views, not copies
        o_s, o_e = trace.start_ns[ops][pick], trace.end_ns[ops][pick]
        dispatch = _dispatching_ops(a_s, a_c, o_s, o_e)
        op_ix = np.arange(ops.start, ops.stop)[pick]
        made = _innermost_ops(trace, op_ix, a_s[a_c == Call.SYNC])
        sync_s, sync_e = (
            [a_s[a_c == Call.SYNC], trace.start_ns[made]],
            [a_e[a_c == Call.SYNC], trace.end_ns[made]],
        )
        by_copy = _copy_call_parts(trace, api, a_s, a_e, a_c, copy_op)
        sync_s.append(by_copy["sync"][0])
        sync_e.append(by_copy["sync"][1])
        copy_s, copy_e = [by_copy["copy"][0]], [by_copy["copy"][1]]
        launch_s, launch_e = [by_copy["launch"][0]], [by_copy["launch"][1]]
        lm = (a_c == Call.LAUNCH) & ~np.isin(api, warm) if warm.size else a_c == Call.LAUNCH
        launch_s += [a_s[lm], o_s[dispatch]]
        launch_e += [a_e[lm], o_e[dispatch]]
        alloc = a_c == Call.ALLOC
        pipe = [p for p in (pipeline.get(lanes.get(k, -1)) for k in (LaneKind.CPU_OPS, LaneKind.ANNOTATIONS)) if p]
        ahead = _run_ahead(a_s, a_e, a_c, waited[api])
        parts = {
            "sync": (sync_s, sync_e),
            "alloc": ([a_s[alloc]], [a_e[alloc]]),
            "copy": (copy_s, copy_e),
            "pipeline": ([p[0] for p in pipe], [p[1] for p in pipe]),
            "ahead_sync": ([ahead[0][0]], [ahead[0][1]]),
            "ahead_alloc": ([ahead[1][0]], [ahead[1][1]]),
            "launch": (launch_s, launch_e),
        }
        out[key] = ThreadTime(key[0], key[1], _cumulative(parts))
    return out


def _dispatching_ops(a_s: np.ndarray, a_c: np.ndarray, o_s: np.ndarray, o_e: np.ndarray) -> np.ndarray:
    """Per CPU op of one thread: it is dispatch overhead (no longer than ``DISPATCH_MAX_NS``, and a call that
    queues work starts inside it): the first queueing call starting at or after the op's start, one binary
    search each, starts inside it when it starts by the op's end."""
    queues = np.sort(a_s[a_c >= Call.LAUNCH])
    # Past the last call, a sentinel that starts inside no op.
    first = np.append(queues, np.iinfo(np.int64).max)[np.searchsorted(queues, o_s, "left")]
    return (first <= o_e) & ((o_e - o_s) <= DISPATCH_MAX_NS)


def _copy_call_parts(
    trace: Trace,
    api: np.ndarray,
    a_s: np.ndarray,
    a_e: np.ndarray,
    a_c: np.ndarray,
    copy_op: Callable[[np.ndarray], np.ndarray],
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One thread's copy calls as (starts, ends) per class: a blocking call is ``sync`` until its copy
    started on the device (the host waited for earlier device work) and ``copy`` from there; an
    asynchronous host<->device call, or one whose copy is not recorded, is ``copy`` whole; an asynchronous
    device-local (DtoD, peer) call is a ``launch``."""
    empty = np.empty(0, np.int64)
    cc = np.flatnonzero(a_c == Call.COPY)
    if not cc.size:
        return {"sync": (empty, empty), "copy": (empty, empty), "launch": (empty, empty)}
    op = copy_op(api[cc])
    has = op >= 0
    op0 = np.maximum(op, 0)
    c_s, c_e = a_s[cc], a_e[cc]
    k_s, k_e = trace.start_ns[op0], trace.end_ns[op0]
    blocking = has & (k_e > c_s) & (k_e <= c_e)
    split_at = np.clip(k_s, c_s, c_e)
    host_link = np.isin(trace.kind[op0], (int(Kind.MEMCPY_HTOD), int(Kind.MEMCPY_DTOH), int(Kind.MEMCPY_OTHER)))
    whole = ~has | (~blocking & host_link)
    as_launch = has & ~blocking & ~host_link
    return {
        "sync": (c_s[blocking], split_at[blocking]),
        "copy": (_cat([split_at[blocking], c_s[whole]]), _cat([c_e[blocking], c_e[whole]])),
        "launch": (c_s[as_launch], c_e[as_launch]),
    }


def _cumulative(parts: dict[str, tuple[list[np.ndarray], list[np.ndarray]]]) -> dict[str, BusySpans]:
    """Each level of ``LEVELS`` as the union of its own intervals and every stronger level's."""
    levels = {}
    acc_s: list[np.ndarray] = []
    acc_e: list[np.ndarray] = []
    for lv in LEVELS:  # cumulative, strongest first: ``ThreadTime.split`` reads them in this order
        add_s, add_e = parts[lv]
        acc_s += add_s
        acc_e += add_e
        levels[lv] = BusySpans(_cat(acc_s), _cat(acc_e))
    return levels


@per_trace
def call_waits(trace: Trace) -> np.ndarray:
    """``waited_ns`` of every call (cached: the threads' split and the sync messages both read it; do not modify)."""
    return waited_ns(trace, api_class(trace))


def waited_ns(trace: Trace, cls: np.ndarray) -> np.ndarray:
    """Per event: how long a synchronising or memory-management call waited for the device (0 otherwise).

    The wait is from the call's start to the end of the latest GPU op of the call's own process (launched
    by one of its threads; an op with no recorded launch counts for every process) that ended inside it:
    the device drained while the host sat in the call (``cudaFree`` synchronises the device as
    ``cudaDeviceSynchronize`` does). A call inside which no such op ended waited on nothing: another
    rank's kernel ending meanwhile (two processes in one nsys report) is not this call's wait.
    """
    out = np.zeros(len(trace), np.int64)
    calls = np.flatnonzero((cls == Call.SYNC) | (cls == Call.ALLOC))
    ops = gpu_work(trace)
    if calls.size == 0 or ops.size == 0:
        return out
    lane_pid = np.asarray([ln.pid for ln in trace.lanes], np.int64)
    call_pid = lane_pid[trace.lane[calls]]
    op_pid = np.where(trace.launch[ops] >= 0, lane_pid[trace.lane[np.maximum(trace.launch[ops], 0)]], -1)
    for pid in np.unique(call_pid).tolist():  # per process (one, or a rank each in a job's report)
        mine = calls[call_pid == pid]
        ends = np.sort(trace.end_ns[ops[(op_pid == pid) | (op_pid == -1)]])
        if ends.size == 0:
            continue
        k = np.searchsorted(ends, trace.end_ns[mine], "right") - 1
        last = ends[np.maximum(k, 0)]
        ok = (k >= 0) & (last > trace.start_ns[mine])
        out[mine[ok]] = (last - trace.start_ns[mine])[ok]
    return out


def _run_ahead(
    a_s: np.ndarray, a_e: np.ndarray, a_c: np.ndarray, waited: np.ndarray
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """One thread's run-ahead lost to waiting calls: ((starts, ends) after syncs, (starts, ends) after allocs).

    From a waiting call's return to the end of the next call that queues work (a launch, copy or sync
    call: the host work and the launch that put the next op on the device), and no longer than the call
    waited: past that the device would have run dry anyway, so the host was late.
    """
    order = np.argsort(a_s, kind="stable")
    s, e, c, w = a_s[order], a_e[order], a_c[order], waited[order]
    queues = np.flatnonzero(c >= Call.LAUNCH)
    out = []
    for cls_ in (Call.SYNC, Call.ALLOC):
        k = np.flatnonzero((c == cls_) & (w > 0))
        if k.size == 0 or queues.size == 0:
            out.append((np.empty(0, np.int64), np.empty(0, np.int64)))
            continue
        j = np.searchsorted(s[queues], e[k], "left")  # the first queueing call starting at or after the return
        has = j < queues.size
        nxt = np.where(has, e[queues[np.minimum(j, queues.size - 1)]], e[k])
        end = np.minimum(nxt, e[k] + w[k])
        out.append((e[k], np.maximum(end, e[k])))
    return out[0], out[1]


@per_trace
def _pipeline_events(trace: Trace) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per CPU-op or annotation lane: (starts, ends) of its input-pipeline events (``INPUT_PIPELINE``)."""
    ids = [i for i, nm in enumerate(trace.names) if INPUT_PIPELINE.search(nm)]
    if not ids:
        return {}
    ev = np.flatnonzero(np.isin(trace.name_id, ids) & (trace.kind != int(Kind.CUDA_API)))
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for lane in np.unique(trace.lane[ev]).tolist():
        mine = ev[trace.lane[ev] == lane]
        out[int(lane)] = (trace.start_ns[mine].astype(np.int64), trace.end_ns[mine].astype(np.int64))
    return out


def _innermost_ops(trace: Trace, op_ix: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The distinct deepest CPU ops (of ``op_ix``, one thread's) open at each instant of ``at``.

    The op that made a synchronising call waited in it (``aten::_local_scalar_dense`` for ``.item()``);
    the ops around it did not: resnet50's DataLoader ``__next__`` collated a batch for 62 ms, then an
    ``aten::to`` inside it synchronised for 0.1 ms, and the whole 62 ms had read as sync. Ops at one
    depth of a thread do not overlap and are in start order, so one binary search per depth finds them.
    """
    best = np.full(at.size, -1, np.int64)
    if at.size == 0 or op_ix.size == 0:
        return np.empty(0, np.int64)
    depth = trace.depth[op_ix]
    for d in np.unique(depth).tolist():  # shallow to deep: a deeper op open at the instant wins
        sel = op_ix[depth == d]
        j = np.searchsorted(trace.start_ns[sel], at, "right") - 1
        jj = np.maximum(j, 0)
        best = np.where((j >= 0) & (trace.end_ns[sel][jj] >= at), sel[jj], best)
    return np.unique(best[best >= 0])


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64, copy=False) if parts else np.empty(0, np.int64)


def copy_op_of_calls(trace: Trace, cls: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """A lookup: for copy calls, the copy (or memset) op each one queued (-1 when none was recorded)."""
    ops = np.flatnonzero(copy_mask(trace) & (trace.launch >= 0))
    ops = ops[cls[trace.launch[ops]] == Call.COPY]
    calls = trace.launch[ops]
    order = np.argsort(calls, kind="stable")
    calls, ops = calls[order], ops[order]

    def lookup(call: np.ndarray) -> np.ndarray:
        k = np.searchsorted(calls, call, "left")
        kk = np.minimum(k, max(calls.size - 1, 0))
        ok = (k < calls.size) & (calls[kk] == call) if calls.size else np.zeros(call.size, bool)
        return np.where(ok, ops[kk] if calls.size else -1, -1)

    return lookup


def split_gaps(trace: Trace, starts: np.ndarray, ends: np.ndarray, nxt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k, 5) split of each gap into sync/alloc/copy/launch/host time, and whether its launching thread is known."""
    shares = np.zeros((starts.size, len(THREAD_CLASSES)), dtype=np.int64)
    launch = np.where(nxt >= 0, trace.launch[np.maximum(nxt, 0)], -1)
    known = launch >= 0
    if not known.any():
        return shares, known
    times = thread_times(trace)
    lane_of = trace.lane[np.maximum(launch, 0)]
    for lane_id in np.unique(lane_of[known]).tolist():
        ln = trace.lanes[lane_id]
        tt = times.get((ln.pid, ln.tid))
        if tt is None:
            continue
        m = known & (lane_of == lane_id)
        shares[m] = tt.split(starts[m], ends[m])
    return shares, known
