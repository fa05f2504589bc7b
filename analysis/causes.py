"""Why the device waited: split each blank region by what filled it and what the launching thread did.

First what the device itself shows: time covered by communication kernels is ``comm`` (the
device waited on a peer or the network), time covered by the profiler's own overhead rows is
``profiler``. The rest is split by the thread that launched the next compute op, the one the
device waited for; every instant of it falls in the strongest class that covers it:

    sync    inside a synchronising call (or the innermost CPU op that makes one: ``.item()``)
    alloc   inside a memory-management call (cudaMalloc, cudaFree, cudaHostAlloc, their HIP twins)
    copy    inside a copy call (or a CPU op that makes one: ``.to("cuda")``)
    launch  inside a launch call, or a short CPU op that issues one (dispatch overhead)
    host    anything else: Python, CPU ops with no CUDA calls, slow CPU ops, untraced time

    thread  ──py──[aten::mul [cudaLaunchKernel]]──py──[aten::item [memcpy][sync....]]──py──[launch]
    class     host  launch                       host  sync (the op inherits its call)  sync (run-ahead)

The run-ahead: host work after a synchronising call that waited for the device (the device drained
while the host sat in it), up to the end of the next call that queues work, is ``sync`` as well, for at most as
long as the call waited: without the sync the host would have done that work while the device ran
what it was waiting for (DESIGN.md § Gap cause). The same after a memory-management call that waited
for the device (``cudaFree`` synchronises) is ``alloc``. Time inside the input pipeline (a DataLoader's
``__next__``) stays ``host``: feeding the GPU ahead is that time's own lever.

A CPU op longer than ``DISPATCH_MAX_NS`` that launches work is host work, not launch overhead:
a first-call GEMM that spends 2 ms loading its module is a host island, not a picket fence.
Per class the covered time is a union with prefix sums, so all gaps split at once.
``unknown`` is left for gaps whose next op has no recorded launch (the trace lacks the host side).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gaplens.analysis.busy import (
    BusySpans,
    compute_mask,
    copy_label,
    copy_mask,
    device_splits,
    is_host_copy,
    overhead_spans,
)
from gaplens.analysis.calls import CAPTURE_HINT, HOST_UNSEEN_HINT, Call, api_class, first_call_launches, has_cpu_side
from gaplens.analysis.critical_path import QUEUE_AS_LAUNCH_NS
from gaplens.analysis.memo import per_trace
from gaplens.analysis.regions import Regions
from gaplens.loaders.model import Kind, LaneKind, Trace

#: A CPU op that issues GPU work and runs longer than this is host work, not dispatch overhead.
DISPATCH_MAX_NS = 100_000
#: An op that starts this long after its launch returned, with the device empty meanwhile, gets a note:
#: queueing on an idle device takes microseconds.
QUEUE_NOTE_NS = 1_000_000
#: Every cause a blank region can have (DESIGN.md § Gap cause).
CAUSES = ("dependency", "sync", "alloc", "copy", "launch", "host", "comm", "profiler", "idle", "unknown")
#: Causes that are no finding: nothing was asked, or the profiler measured itself.
NOT_WORK = (CAUSES.index("idle"), CAUSES.index("profiler"))
THREAD_CLASSES = ("sync", "alloc", "copy", "launch", "host")
#: Host ranges and ops that are the input pipeline: the step thread waiting for (or making) its next batch.
#: Their time is ``host`` even after a sync: "feed the GPU ahead" (DataLoader workers, prefetch) is its lever.
INPUT_PIPELINE = re.compile(r"^enumerate\(DataLoader\)#|DataLoader.*__next__", re.IGNORECASE)
NO_LAUNCH_HINT = "the GPU op after this gap has no recorded launch call: its host thread was not traced"
NO_NEXT_HINT = "no GPU work follows this gap in the trace"
DEPENDENCY_HINT = (
    "the next GPU op was queued before the gap began, so the host was not late: the device waited on a "
    "dependency (stream order, another stream's or device's work, another process) that the trace does not record"
)
DEPENDENCY_WAIT_HINT = (
    "the next GPU op was queued before the gap began behind a stream wait (cudaStreamWaitEvent): the device "
    "waited on another stream's work, not on the host"
)
DEPENDENCY_GRAPH_HINT = (
    "the next GPU op belongs to a graph launched before the gap began: the device waited on a graph edge "
    "(a node's dependencies), not on the host"
)
COPY_CALL_HINT = "the launching thread sat in copy calls (cudaMemcpy*) while the device ran no compute"
IDLE_HINT = "nothing was asked of the device here (outside every phase, or no host work in flight)"
PROFILER_HINT = "the profiler's own work (buffer flushes, initialisation) covers most of this region: an artefact"
COMM_HINT = (
    "the device only ran communication here: it waited for a peer or the network "
    "(compare the ranks: gaplens ranks RANK_TRACES…)"
)


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
        at = {lv: _busy_between(self.levels[lv], s, e) for lv in LEVELS}
        own = {lv: at[lv] - (at[LEVELS[k - 1]] if k else 0) for k, lv in enumerate(LEVELS)}
        sync = own["sync"] + own["ahead_sync"]
        alloc = own["alloc"] + own["ahead_alloc"]
        host = (e - s) - at["launch"] + own["pipeline"]
        return np.stack((sync, alloc, own["copy"], own["launch"], host), axis=1).clip(min=0)


def _busy_between(spans: BusySpans, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    if spans.start.size == 0:
        return np.zeros(s.size, dtype=np.int64)
    return spans.busy_before(e) - spans.busy_before(s)


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
    - launch: launch calls, except memory management and module loading and the first launch of a
      kernel that took ``calls.FIRST_CALL_MIN_NS`` or more (it loaded the module: warm-up host work);
      a short CPU op that makes any call that queues work (dispatch overhead);
    - pipeline: the input pipeline's ranges and ops (``INPUT_PIPELINE``): host time, never run-ahead;
    - ahead_sync / ahead_alloc: the run-ahead after a sync or memory-management call that waited for
      the device: the Python and the launch that follow it, up to the end of the next call that queues
      work and at most as long as the call waited (stronger than launch: that launch would have been
      made while the device still worked).
    """
    cls = api_class(trace)
    copy_op = _copy_op_of_calls(trace, cls)
    warm = first_call_launches(trace)
    waited = _waited_ns(trace, cls)
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
        a_s, a_e, a_c = trace.start_ns[api], trace.end_ns[api], cls[api]
        ops = trace.lane_events(lanes[LaneKind.CPU_OPS]) if LaneKind.CPU_OPS in lanes else slice(0, 0)
        is_op = trace.kind[ops] == int(Kind.CPU_OP)
        o_s, o_e = trace.start_ns[ops][is_op], trace.end_ns[ops][is_op]
        # Calls of a class or stronger that start inside each op: prefix counts over the calls in
        # start order, found with one pair of binary searches.
        order = np.argsort(a_s, kind="stable")
        starts, classes = a_s[order], a_c[order]
        lo, hi = np.searchsorted(starts, o_s, "left"), np.searchsorted(starts, o_e, "right")

        def inside(lv: Call, lo: np.ndarray = lo, hi: np.ndarray = hi, classes: np.ndarray = classes) -> np.ndarray:
            before = np.concatenate(([0], np.cumsum(classes >= lv)))
            return before[hi] > before[lo]

        short = (o_e - o_s) <= DISPATCH_MAX_NS
        op_ix = np.arange(ops.start, ops.stop)[is_op]
        made = _innermost_ops(trace, op_ix, a_s[a_c == Call.SYNC])
        sync_s, sync_e = (
            [a_s[a_c == Call.SYNC], trace.start_ns[made]],
            [a_e[a_c == Call.SYNC], trace.end_ns[made]],
        )
        copy_s: list[np.ndarray] = []
        copy_e: list[np.ndarray] = []
        launch_s: list[np.ndarray] = []
        launch_e: list[np.ndarray] = []
        cc = np.flatnonzero(a_c == Call.COPY)
        if cc.size:
            op = copy_op(api[cc])
            has = op >= 0
            op0 = np.maximum(op, 0)
            c_s, c_e = a_s[cc], a_e[cc]
            k_s, k_e = trace.start_ns[op0], trace.end_ns[op0]
            blocking = has & (k_e > c_s) & (k_e <= c_e)
            split_at = np.clip(k_s, c_s, c_e)
            sync_s.append(c_s[blocking])
            sync_e.append(split_at[blocking])
            host_link = np.isin(trace.kind[op0], (int(Kind.MEMCPY_HTOD), int(Kind.MEMCPY_DTOH), int(Kind.MEMCPY_OTHER)))
            whole = ~has | (~blocking & host_link)
            copy_s += [split_at[blocking], c_s[whole]]
            copy_e += [c_e[blocking], c_e[whole]]
            as_launch = has & ~blocking & ~host_link
            launch_s.append(c_s[as_launch])
            launch_e.append(c_e[as_launch])
        lm = (a_c == Call.LAUNCH) & ~np.isin(api, warm)
        launch_s += [a_s[lm], o_s[inside(Call.LAUNCH) & short]]
        launch_e += [a_e[lm], o_e[inside(Call.LAUNCH) & short]]
        alloc = a_c == Call.ALLOC
        pipe = [p for p in (pipeline.get(lanes.get(k, -1)) for k in (LaneKind.CPU_OPS, LaneKind.ANNOTATIONS)) if p]
        ahead = _run_ahead(a_s, a_e, a_c, waited[api])
        levels = {}
        acc_s: list[np.ndarray] = []
        acc_e: list[np.ndarray] = []
        parts = {
            "sync": (sync_s, sync_e),
            "alloc": ([a_s[alloc]], [a_e[alloc]]),
            "copy": (copy_s, copy_e),
            "pipeline": ([p[0] for p in pipe], [p[1] for p in pipe]),
            "ahead_sync": ([ahead[0][0]], [ahead[0][1]]),
            "ahead_alloc": ([ahead[1][0]], [ahead[1][1]]),
            "launch": (launch_s, launch_e),
        }
        for lv in LEVELS:  # cumulative, strongest first: ``ThreadTime.split`` reads them in this order
            add_s, add_e = parts[lv]
            acc_s += add_s
            acc_e += add_e
            levels[lv] = BusySpans(_cat(acc_s), _cat(acc_e))
        out[key] = ThreadTime(key[0], key[1], levels)
    return out


def _waited_ns(trace: Trace, cls: np.ndarray) -> np.ndarray:
    """Per event: how long a synchronising or memory-management call waited for the device (0 otherwise).

    The wait is from the call's start to the end of the latest GPU op of the call's own process (launched
    by one of its threads; an op with no recorded launch counts for every process) that ended inside it:
    the device drained while the host sat in the call (``cudaFree`` synchronises the device as
    ``cudaDeviceSynchronize`` does). A call inside which no such op ended waited on nothing: another
    rank's kernel ending meanwhile (two processes in one nsys report) is not this call's wait.
    """
    from gaplens.analysis.busy import gpu_work

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
    return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)


def _copy_op_of_calls(trace: Trace, cls: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
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


def next_compute_ops(trace: Trace, devices: np.ndarray, gap_end: np.ndarray) -> np.ndarray:
    """For each gap end, the compute op of that device starting first at or after it (-1 if none).

    A region at the window's end has no compute after it; the GPU op that ends it (a copy, a
    collective) stands in, so its launching thread still explains it.
    """
    out = _first_at_or_after(trace, compute_mask(trace), devices, gap_end)
    none = out < 0
    if none.any():
        from gaplens.analysis.busy import gpu_work

        work = np.zeros(len(trace), bool)
        work[gpu_work(trace)] = True
        out[none] = _first_at_or_after(trace, work, devices[none], gap_end[none], before=True)
    return out


def _first_at_or_after(
    trace: Trace, mask: np.ndarray, devices: np.ndarray, t: np.ndarray, before: bool = False
) -> np.ndarray:
    """Per (device, t): the op of ``mask`` starting first at or after t; with ``before``, else the last one
    starting before t (the op running at a trailing region's end)."""
    out = np.full(t.size, -1, dtype=np.int64)
    dev_of = trace.device_of_event()
    for dev in np.unique(devices).tolist():
        ops = np.flatnonzero(mask & (dev_of == dev))
        m = devices == dev
        starts = trace.start_ns[ops]
        order = np.lexsort((trace.end_ns[ops], starts))
        s_sorted = starts[order]
        k = np.searchsorted(s_sorted, t[m], "left")
        ok = k < s_sorted.size
        got = np.full(int(m.sum()), -1, dtype=np.int64)
        got[ok] = ops[order[k[ok]]]
        if before:
            back = ~ok & (s_sorted.size > 0)
            got[back] = ops[order[np.maximum(k[back] - 1, 0)]] if s_sorted.size else -1
        out[m] = got
    return out


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


def classify(trace: Trace, reg: Regions, nxt: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per gap: cause code (index into ``CAUSES``), (k, len(CAUSES)) shares, and a message.

    What the device shows first: communication, then copies, then the profiler's own rows. The rest:
    ``dependency`` when the op that ends the gap was launched (its call ended) before the gap began, the
    host was not late; otherwise the launching thread's split into sync, copy, launch and host.
    """
    starts, ends, devs = reg.start_ns, reg.end_ns, reg.device
    n = starts.size
    dur = np.maximum(ends - starts, 1).astype(np.float64)
    out = np.zeros((n, len(CAUSES)))
    col = {c: k for k, c in enumerate(CAUSES)}
    # What the device shows: communication first, then copies, then the profiler's own work.
    comm_ns = np.zeros(n)
    comm_copy_ns = np.zeros(n)
    either_ns = np.zeros(n)
    prof = overhead_spans(trace)
    splits = device_splits(trace)
    for dev in np.unique(devs).tolist():
        m = devs == dev
        sp = splits[dev]
        comm_ns[m] = _busy_between(sp.comm, starts[m], ends[m])
        cc = BusySpans(np.concatenate((sp.comm.start, sp.copy.start)), np.concatenate((sp.comm.end, sp.copy.end)))
        comm_copy_ns[m] = _busy_between(cc, starts[m], ends[m])
        both = BusySpans(np.concatenate((cc.start, prof.start)), np.concatenate((cc.end, prof.end)))
        either_ns[m] = _busy_between(both, starts[m], ends[m])
    out[:, col["comm"]] = comm_ns / dur
    out[:, col["copy"]] = (comm_copy_ns - comm_ns) / dur
    out[:, col["profiler"]] = (either_ns - comm_copy_ns) / dur
    rest = np.clip(1.0 - either_ns / dur, 0.0, 1.0)
    queued = queued_before(trace, nxt, starts)
    # Launched during the region: the host was late until its call returned; what the op waited after that,
    # beyond the launch path's own latency, it waited queued (a dependency), not for the host.
    a = np.where(nxt >= 0, trace.launch[np.maximum(nxt, 0)], -1)
    launch_end = np.where(a >= 0, trace.end_ns[np.maximum(a, 0)], ends)
    waited = np.clip(ends - launch_end - QUEUE_AS_LAUNCH_NS, 0, ends - starts)
    waited = np.where(queued | (a < 0), 0, waited)
    split, known = split_gaps(trace, starts, ends - waited, nxt)
    queued &= known
    frac = split / dur[:, None]
    total = np.maximum(frac.sum(axis=1), 1e-12)
    late = rest * (1.0 - waited / dur)
    for k, c in enumerate(THREAD_CLASSES):
        out[:, col[c]] += np.where(known & ~queued, late * frac[:, k] / total, 0.0)
    out[:, col["dependency"]] = np.where(queued, rest, np.where(known, rest * waited / dur, 0.0))
    out[:, col["unknown"]] = np.where(known, 0.0, rest)
    out[reg.idle] = 0.0
    out[reg.idle, col["idle"]] = 1.0
    out = np.round(out, 4)
    cause = np.argmax(out, axis=1).astype(np.int8)
    return cause, out, _messages(trace, reg, nxt, cause, known)


def queued_before(trace: Trace, nxt: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per gap: the op that ends it had been launched (its launch call ended) at or before the gap began."""
    a = np.where(nxt >= 0, trace.launch[np.maximum(nxt, 0)], -1)
    return (a >= 0) & (trace.end_ns[np.maximum(a, 0)] <= starts)


def _messages(trace: Trace, reg: Regions, nxt: np.ndarray, cause: np.ndarray, known: np.ndarray) -> list[str]:
    messages = [""] * len(reg)
    col = {c: k for k, c in enumerate(CAUSES)}
    for c, hint in (("idle", IDLE_HINT), ("profiler", PROFILER_HINT), ("comm", COMM_HINT)):
        for i in np.flatnonzero(cause == col[c]).tolist():
            messages[i] = hint
    dep = np.flatnonzero(cause == col["dependency"])
    if dep.size:
        waited = recorded_waits(trace)
        graphs = _graph_launched(trace, nxt[dep])
        called = wait_call_before(trace, nxt[dep]) >= 0
        for i, g, w in zip(dep.tolist(), graphs.tolist(), called.tolist(), strict=True):
            if int(nxt[i]) in waited or w:
                messages[i] = DEPENDENCY_WAIT_HINT
            elif g:
                messages[i] = DEPENDENCY_GRAPH_HINT
            else:
                messages[i] = DEPENDENCY_HINT
    for c, cls_, head in (
        ("alloc", Call.ALLOC, "the launching thread sat in memory-management calls"),
        ("sync", Call.SYNC, "the launching thread synchronised"),
    ):
        picked = np.flatnonzero(cause == col[c])
        for i, text in zip(picked.tolist(), _call_messages(trace, reg, picked, nxt, cls_, head), strict=True):
            messages[i] = text
    copies = np.flatnonzero(cause == col["copy"])
    if copies.size:
        for i, text in zip(copies.tolist(), _copy_messages(trace, reg, copies, nxt), strict=True):
            messages[i] = text
    if "cpu_ops" in trace.meta.lacks:
        for i in np.flatnonzero(cause == col["host"]).tolist():
            messages[i] = messages[i] or HOST_UNSEEN_HINT
    for i, text in _queue_notes(trace, reg, nxt, cause).items():
        messages[i] = f"{messages[i]}; {text}" if messages[i] else text
    unknown = np.flatnonzero(cause == col["unknown"])
    if unknown.size:
        cpu = has_cpu_side(trace)
        for i in unknown.tolist():
            messages[i] = CAPTURE_HINT if not cpu else (NO_LAUNCH_HINT if nxt[i] >= 0 else NO_NEXT_HINT)
    return messages


def _queue_notes(trace: Trace, reg: Regions, nxt: np.ndarray, cause: np.ndarray) -> dict[int, str]:
    """Regions whose op started more than ``QUEUE_NOTE_NS`` after its launch call returned while the device
    ran nothing at all: nothing in the trace explains the delay (lazy module loading, a graph's first upload,
    or host and device clocks that disagree). Said, with the numbers, rather than blamed on anyone."""
    from gaplens.analysis.units import fmt_ns

    a = np.where(nxt >= 0, trace.launch[np.maximum(nxt, 0)], -1)
    a0 = np.maximum(a, 0)
    op_start = trace.start_ns[np.maximum(nxt, 0)]
    delay = op_start - trace.end_ns[a0]
    cand = np.flatnonzero((a >= 0) & (delay > QUEUE_NOTE_NS) & ~np.isin(cause, [CAUSES.index("idle")]))
    out: dict[int, str] = {}
    if cand.size == 0:
        return out
    splits = device_splits(trace)
    empty = np.zeros(cand.size, bool)
    for dev in np.unique(reg.device[cand]).tolist():
        sp = splits.get(int(dev))
        if sp is None:
            continue
        m = reg.device[cand] == dev
        # Nothing ran between the call's return and the op's start (else the queue explains the wait).
        empty[m] = _busy_between(sp.busy, trace.end_ns[a0[cand[m]]], op_start[cand[m]]) == 0
    for i in cand[empty].tolist():
        call = trace.name(int(a0[i]))
        out[i] = (
            f"{trace.name(int(nxt[i]))[:60]} started {fmt_ns(int(delay[i]))} after {call} returned, with nothing "
            "running on the device: a queue delay the trace does not explain (lazy module loading, a graph's "
            "first upload, or host and device clocks that disagree)"
        )
    return out


@per_trace
def recorded_waits(trace: Trace) -> dict[int, tuple[int, int]]:
    """GPU op -> (the stream-wait row it waited on, the awaited op), from the recorded waits."""
    from gaplens.analysis.busy import gpu_work
    from gaplens.analysis.waits import event_wait_rows

    dst, src, row = event_wait_rows(trace, gpu_work(trace))
    return {int(d): (int(r), int(s)) for d, s, r in zip(dst.tolist(), src.tolist(), row.tolist(), strict=True)}


@per_trace
def _wait_calls(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The stream-wait API calls (cudaStreamWaitEvent, hipStreamWaitEvent, cuStreamWaitEvent) by lane, then start."""
    api = np.flatnonzero(trace.kind == int(Kind.CUDA_API))
    ids, inv = np.unique(trace.name_id[api], return_inverse=True)
    is_wait = np.asarray(["streamwaitevent" in trace.names[int(i)].lower() for i in ids.tolist()], bool)
    calls = api[is_wait[inv.reshape(-1)]] if api.size else api
    order = np.lexsort((trace.start_ns[calls], trace.lane[calls]))
    return calls[order], trace.lane[calls[order]].astype(np.int64)


def record_call(trace: Trace, row: int) -> int:
    """The event-record call a recorded stream wait names (its correlation id), in the wait's process; -1 if absent."""
    from gaplens.loaders.syncs import parse_wait

    corr = parse_wait(trace.details[int(trace.detail_id[row])]).record_corr
    if corr < 0:
        return -1
    pid = trace.lanes[int(trace.lane[row])].pid
    call = int(trace.launch[row])
    if call >= 0:
        pid = trace.lanes[int(trace.lane[call])].pid
    found = np.flatnonzero((trace.corr == corr) & (trace.kind == int(Kind.CUDA_API)))
    mine = [int(h) for h in found.tolist() if trace.lanes[int(trace.lane[h])].pid == pid]
    return min(mine, key=lambda h: int(trace.start_ns[h])) if mine else -1


def wait_call_before(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """Per op: the latest stream-wait call its launching thread made between the launch of the previous op on
    the op's stream and the op's own launch (the host asked the stream to wait there; -1 if none).

    Without recorded wait rows (Kineto without cuda_sync activity) this is the wait the trace shows.
    """
    calls, lanes = _wait_calls(trace)
    out = np.full(ops.size, -1, np.int64)
    a = np.where(ops >= 0, trace.launch[np.maximum(ops, 0)], -1)
    ok = a >= 0
    if calls.size == 0 or not ok.any():
        return out
    op, a = ops[ok], a[ok]
    # The previous op on the same stream: events of a lane are stored together, in start order.
    prev = op - 1
    same = (prev >= 0) & (trace.lane[np.maximum(prev, 0)] == trace.lane[op])
    pa = np.where(same, trace.launch[np.maximum(prev, 0)], -1)
    t0 = np.where(pa >= 0, trace.start_ns[np.maximum(pa, 0)], np.iinfo(np.int64).min)
    # Wait calls keyed by (thread lane, start): the latest one before each launch call, on its lane.
    lo = int(min(trace.start_ns[calls].min(), trace.start_ns[a].min()))
    span = int(max(trace.start_ns[calls].max(), trace.start_ns[a].max())) - lo + 1
    key = lanes * span + (trace.start_ns[calls] - lo)
    q_lane = trace.lane[a].astype(np.int64)
    k = np.searchsorted(key, q_lane * span + (trace.start_ns[a] - lo), "left") - 1
    kk = np.maximum(k, 0)
    hit = (k >= 0) & (lanes[kk] == q_lane) & (trace.start_ns[calls[kk]] >= t0)
    got = np.where(hit, calls[kk], -1)
    out[ok] = got
    return out


def _graph_launched(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """Per op: True when its launch call is a CUDA/HIP graph launch (the gap is a graph edge)."""
    a = np.where(ops >= 0, trace.launch[np.maximum(ops, 0)], -1)
    ok = a >= 0
    out = np.zeros(ops.size, bool)
    if ok.any():
        ids = trace.name_id[a[ok]]
        uniq, inv = np.unique(ids, return_inverse=True)
        graph = np.asarray(["graphlaunch" in trace.names[int(u)].lower() for u in uniq.tolist()], bool)
        out[ok] = graph[inv.reshape(-1)]
    return out


def _copy_messages(trace: Trace, reg: Regions, gaps: np.ndarray, nxt: np.ndarray) -> list[str]:
    """For copy-caused gaps: which copies ran (direction and memory kind) and whether they crossed the host link.

    With no copy on the device, the copy calls the launching thread sat in, named by the copy each queued.
    """
    from gaplens.analysis.units import fmt_ns

    cm = copy_mask(trace)
    dev_of = trace.device_of_event()
    out = []
    by_dev: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for i in gaps.tolist():
        d = int(reg.device[i])
        if d not in by_dev:
            ops = np.flatnonzero(cm & (dev_of == d))
            ops = ops[np.argsort(trace.start_ns[ops], kind="stable")]
            by_dev[d] = (ops, trace.start_ns[ops], np.maximum.accumulate(trace.end_ns[ops]) if ops.size else ops)
        ops, st, reach = by_dev[d]
        s, e = int(reg.start_ns[i]), int(reg.end_ns[i])
        hi = int(np.searchsorted(st, e, "left"))
        lo = int(np.searchsorted(reach, s, "right")) if ops.size else 0
        labels: dict[str, int] = {}
        for j in ops[lo:hi].tolist():
            ov = min(int(trace.end_ns[j]), e) - max(int(trace.start_ns[j]), s)
            if ov > 0:
                lab = copy_label(trace, j)
                labels[lab] = labels.get(lab, 0) + ov
        if not labels:
            out.append(_copy_call_text(trace, int(nxt[i]), s, e))
            continue
        ranked = sorted(labels.items(), key=lambda kv: -kv[1])
        text = "copies ran here: " + ", ".join(f"{k} {fmt_ns(v)}" for k, v in ranked[:3])
        if not any(is_host_copy(k) for k in labels):
            text += " (device-local: no host<->device traffic; look at why the data is copied at all)"
        out.append(text)
    return out


def _call_messages(trace: Trace, reg: Regions, gaps: np.ndarray, nxt: np.ndarray, cls_: Call, head: str) -> list[str]:
    """For alloc- or sync-caused gaps: the calls of that class the launching thread made in the region and
    just before it (the run-ahead follows the call), by name with their count and time: ``cudaFree ×12 3.1 ms``."""
    from gaplens.analysis.units import fmt_ns

    cls = api_class(trace)
    waited = _waited_ns(trace, cls)
    per_lane: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # the class's calls of a lane, once
    out = []
    for i in gaps.tolist():
        call = int(trace.launch[int(nxt[i])]) if nxt[i] >= 0 else -1
        if call < 0:
            out.append("")
            continue
        s, e = int(reg.start_ns[i]), int(reg.end_ns[i])
        lane = int(trace.lane[call])
        if lane not in per_lane:
            sl = trace.lane_events(lane)
            idx = np.arange(sl.start, sl.stop)
            mine_all = idx[cls[idx] == cls_]  # one thread's calls: in start order, not overlapping
            per_lane[lane] = (mine_all, trace.start_ns[mine_all], np.maximum.accumulate(trace.end_ns[mine_all]))
        mine, starts, ends = per_lane[lane]
        # the calls inside the region, else the last one of the class before it (whose run-ahead this may be)
        lo, hi = int(np.searchsorted(ends, s, "right")), int(np.searchsorted(starts, e, "left"))
        inside = mine[lo:hi]
        if inside.size == 0 and lo > 0:
            inside = mine[lo - 1 : lo]
        if inside.size == 0:
            out.append(head)
            continue
        named: dict[str, list[int]] = {}
        for c in inside.tolist():
            acc = named.setdefault(trace.name(c), [0, 0])
            acc[0] += 1
            acc[1] += int(trace.end_ns[c] - trace.start_ns[c])
        ranked = sorted(named.items(), key=lambda kv: -kv[1][1])
        calls = ", ".join(f"{k} ×{n} {fmt_ns(t)}" for k, (n, t) in ranked[:3])
        last = int(inside[np.argmax(trace.end_ns[inside])])
        ahead = int(trace.end_ns[last]) < e and waited[last] > 0
        tail = (
            "; then ran host work it could have done while the device still had work (run-ahead lost)" if ahead else ""
        )
        out.append(f"{head}: {calls}{tail}")
    return out


def _copy_call_text(trace: Trace, nxt: int, s: int, e: int) -> str:
    """What the launching thread's copy calls inside [s, e) copied: ``HtoD pageable`` and the time in the calls."""
    from gaplens.analysis.units import fmt_ns

    call = int(trace.launch[nxt]) if nxt >= 0 else -1
    if call < 0:
        return COPY_CALL_HINT
    lane = int(trace.lane[call])
    sl = trace.lane_events(lane)
    idx = np.arange(sl.start, sl.stop)
    idx = idx[(trace.start_ns[idx] < e) & (trace.end_ns[idx] > s) & (api_class(trace)[idx] == Call.COPY)]
    if idx.size == 0:
        return COPY_CALL_HINT
    ops = _copy_op_of_calls(trace, api_class(trace))(idx)
    labels: dict[str, int] = {}
    for c, op in zip(idx.tolist(), ops.tolist(), strict=True):
        lab = copy_label(trace, op) if op >= 0 else "copy"
        labels[lab] = labels.get(lab, 0) + min(int(trace.end_ns[c]), e) - max(int(trace.start_ns[c]), s)
    ranked = sorted(labels.items(), key=lambda kv: -kv[1])
    text = "the launching thread sat in copy calls: " + ", ".join(f"{k} {fmt_ns(v)}" for k, v in ranked[:3])
    if not any(is_host_copy(k) for k in labels):
        text += " (device-local copies: no host<->device traffic)"
    return text
