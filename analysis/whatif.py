"""What-if: replay the critical-path graph with a change and predict window and step times.

The trace is a realised schedule. Every node kept the slack it had to each of its
predecessors; a change moves some nodes, and a node moves earlier only when *all* its
predecessors let it (the binding one had zero slack; the others catch up once their slack
is used). So work that did not depend on the change does not move, and a change off the
critical path predicts no gain. Edges (as ``analysis.critical_path``):

    stream   an op starts after the ops before it on its stream   (start' = max(...) + its own latency)
    launch   ... and after its launch call handed it over         (the call moves with its host thread)
    wait     ... and after the op it waited on (recorded or inferred cross-stream waits)
    sync     a blocking call returns after the op it waited on ends, or after its own cost
    host     between blocking calls a thread runs freely: its points move with its last return,
             minus the host time a change took off it (a thread that never blocks, autograd's, follows
             its process's blocking thread at the same moment)

    thread  [launch]──island──[launch]──[sync ······]──[launch]
    stream       ███ k1          ███ k2 ───────╯            ███ k3
    --remove host: the island is taken off the thread; k2, the sync's return, k3 and the
    thread's later points move earlier by as much as their other predecessors allow.

Changes (one per lever: ``analysis.lever_changes`` says which lever is which change):
- ``remove host``: the host islands (host-cause regions as wide as the host-island smell's bound),
  and the step thread's wait for its next batch (the input pipeline: a DataLoader's ``__next__``),
  are taken off their threads: from the region's start until the next op's launch handed it over
  (time blocked inside a call waiting for the device excepted: it follows the device). The launch
  loop's short gaps, a compiled or graphed call's own host overhead and warm-up stay.
- ``remove launch``: launch-cause regions and the shorter host gaps between launches, as above.
- ``remove sync``: every synchronising call stops waiting (it keeps its own cost); the host's own work
  stays but no longer waits for the device first, so it runs ahead (a sync per layer: the step tends
  to the longer of the host's and the device's work, not their sum).
- ``remove alloc``: memory-management calls cost what a caching allocator's reuse costs (nothing),
  and the waits inside them (``cudaFree`` synchronises) go with them.
- ``remove copy``: the copy-cause regions' host time as above; blocking copy calls stop waiting; and
  host<->device copies on a stream that also computes leave that stream's order, as if prefetched on
  a side stream ahead of their consumers.
- ``graph PHASE`` (``graph step``): every instance of the phase captured as one CUDA graph: the host's
  work inside it becomes one graph launch (``GRAPH_LAUNCH_NS_PER_NODE`` per op), its GPU ops keep
  their durations, order and dependencies and run back to back (``GRAPH_NODE_GAP_NS``). Refused
  where an instance synchronises (a graph cannot hold a blocking call).
- ``scale GLOB=FACTOR``: GPU ops (kernels, copies, memsets) whose name matches the glob
  take FACTOR times as long.

The replay walks the blocking calls in the order they returned (a few per step); between
two returns every GPU op is replayed at once, per stream, as a max-plus prefix scan
(x_i = max(x_{i-1} + a_i, b_i) is ``A_i + max.accumulate(b - A)``), so a 1M-event trace takes
a Python step per blocking call and numpy for the rest.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

import numpy as np

from gaplens.analysis.memo import per_trace
from gaplens.loaders.model import Kind, Trace, TraceError

#: Causes whose host-side time can be taken off a thread.
REMOVABLE = ("host", "launch", "sync", "alloc", "copy")
#: Causes whose blocking calls of this class stop waiting where they overlap the cause's regions.
UNBLOCKS = {"copy": 2}  # analysis.calls.Call.COPY
#: Host cost of one graph launch per op it replays: cudaGraphLaunch took 160 us (median of 8, 156-178 us)
#: for 186 kernels in round-3 graphs_fixed (H200, PyTorch 2.11): 0.86 us a node.
GRAPH_LAUNCH_NS_PER_NODE = 860
#: Device time between two ops of one replayed graph: the median gap between consecutive kernels of
#: round-3 graphs_fixed's replays is 0.42 us (p10-p90 0.38-0.51 us, 1,496 kernels).
GRAPH_NODE_GAP_NS = 420
#: Graphs ``--graph`` captures per instance at most: a step that reads one value back (the token, the loss)
#: is captured around that synchronisation, as serving engines do; a step that synchronises more often
#: than that has the synchronisations as its lever first (``--remove sync``), and is refused.
MAX_GRAPHS_PER_INSTANCE = 2
#: A predicted change of the median step below this share is "no gain": it is under the
#: step-to-step spread of real recordings (round-3 pairs: median absolute deviation 0.3-6% of the step).
NO_GAIN_SHARE = 0.01
#: Replay passes over one batch of ops that wait on each other across streams (a chain of
#: cross-stream waits deeper than this inside one sync interval is cut, and noted).
MAX_WAIT_PASSES = 8
CUT_NOTE = (
    f"a chain of cross-stream waits deeper than {MAX_WAIT_PASSES} inside one sync interval was cut: "
    "ops at its end may be predicted early"
)
#: "minus infinity" for int64 times: far below any trace time, far from overflow when added to.
NEG = -(1 << 62)


@dataclass(frozen=True)
class Change:
    """One change: ``Change("remove", "host")``, ``Change("graph", "step")``, ``Change("scale", "Memcpy*", 0.12)``."""

    kind: str
    target: str
    factor: float = 1.0
    every: bool = False  # remove host: every host-cause region (no island / launch-loop split)

    def text(self) -> str:
        if self.kind == "scale":
            return f"--scale '{self.target}={self.factor:g}'"
        return f"--{self.kind} {self.target}"


def parse_graph(target: str) -> Change:
    """``--graph PHASE``: a phase name (or family, ``decode_step``) or ``step`` for the step owner's step."""
    if not target.strip():
        raise ValueError("--graph wants a phase name or 'step'")
    return Change("graph", target.strip())


def parse_scale(text: str) -> Change:
    """``GLOB=FACTOR`` (the last ``=`` splits: globs may hold one) -> a scale change; ValueError if malformed."""
    glob, sep, factor = text.rpartition("=")
    if not sep or not glob:
        raise ValueError(f"--scale wants GLOB=FACTOR, got {text!r}")
    try:
        f = float(factor)
    except ValueError:
        raise ValueError(f"--scale {text!r}: FACTOR must be a number") from None
    if not np.isfinite(f) or f < 0:
        raise ValueError(f"--scale {text!r}: FACTOR must be a finite number >= 0")
    return Change("scale", glob, f)


def parse_remove(cause: str) -> Change:
    if cause not in REMOVABLE:
        raise ValueError(f"--remove {cause!r}: one of {', '.join(REMOVABLE)} (host-side causes)")
    return Change("remove", cause)


# ---- the graph, as arrays the replay needs (independent of the change) ----------------------


@dataclass
class _Base:
    g: np.ndarray  # GPU ops, sorted by (lane, start)
    lane_rank: np.ndarray  # per position in g
    lane_lo: np.ndarray  # first position of each lane rank
    s: np.ndarray
    e: np.ndarray
    ov: np.ndarray  # overlap with the running end of the lane before it (>= 0)
    r: np.ndarray  # the op's own latency after its latest constraint (>= 0)
    call: np.ndarray  # launch call (event index) or -1
    arrive: np.ndarray  # when the call handed the op over (NEG if none)
    wsrc: np.ndarray  # position in g of the op it waited on, -1
    wov: np.ndarray  # the wait source's end past this op's start (clock noise), >= 0
    anchor: np.ndarray  # start when the op has no predecessor at all, else NEG
    thread: np.ndarray  # per event: host thread number, -1 for device lanes
    thread_pid: np.ndarray  # per thread number: its pid
    # blocking calls, in the order they returned
    b_call: np.ndarray
    b_start: np.ndarray
    b_end: np.ndarray
    b_op: np.ndarray  # awaited op, as a position in g
    b_wait: np.ndarray  # time the call spent waiting for the device
    b_slack: np.ndarray  # slack of the sync edge (> 0 when the op had ended before the call)


@per_trace
def _base(trace: Trace) -> _Base:
    from gaplens.analysis.busy import gpu_work
    from gaplens.analysis.calls import Call, api_class
    from gaplens.analysis.critical_path import _infer_waits, graph
    from gaplens.analysis.waits import latest_event_waits

    start, end = trace.start_ns, trace.end_ns
    ops = gpu_work(trace)
    order = np.lexsort((start[ops], trace.lane[ops]))
    g = ops[order]
    lane = trace.lane[g].astype(np.int64)
    new_lane = np.ones(g.size, dtype=bool)
    new_lane[1:] = lane[1:] != lane[:-1]
    lane_rank = np.cumsum(new_lane) - 1
    lane_lo = np.flatnonzero(new_lane)
    s, e = start[g].astype(np.int64), end[g].astype(np.int64)
    # running max of ends before each op on its lane
    pe = np.full(g.size, NEG, np.int64)
    if g.size:
        span = int(e.max()) - int(e.min()) + 1
        shifted = (e - int(e.min())) + lane_rank * span
        reach = np.maximum.accumulate(shifted) - lane_rank * span + int(e.min())
        pe[1:] = reach[:-1]
        pe[new_lane] = NEG
    ov = np.where(pe > s, pe - s, 0)
    pe_eff = pe - ov
    # launch: copy and sync calls enqueue on entry; a launch call hands over when it returns
    cls = api_class(trace)
    a = trace.launch[g]
    a0 = np.maximum(a, 0)
    ok = (a >= 0) & (start[a0] <= s)
    arrive = np.where(cls[a0] >= Call.COPY, start[a0], np.minimum(end[a0], s))
    arrive = np.where(ok, arrive, NEG)
    call = np.where(ok, a, -1)
    # cross-stream waits: every recorded one (not only the binding one) plus the inferred ones
    pos = np.full(len(trace), -1, np.int64)
    pos[g] = np.arange(g.size)
    wsrc = np.full(g.size, -1, np.int64)
    dst, src = latest_event_waits(trace, ops)
    if dst.size:
        wsrc[pos[dst]] = pos[src]
    if g.size:
        inferred = np.where(wsrc >= 0, g[np.maximum(wsrc, 0)], -1)
        _infer_waits(trace, g, np.maximum(pe, arrive), inferred)
        wsrc = np.where(inferred >= 0, pos[np.maximum(inferred, 0)], -1)
    w_end = np.where(wsrc >= 0, e[np.maximum(wsrc, 0)], NEG)
    wov = np.where(w_end > s, w_end - s, 0)
    latest = np.maximum(np.maximum(pe_eff, arrive), w_end - wov)
    anchor = np.where(latest <= NEG, s, NEG)
    r = np.where(latest <= NEG, 0, s - latest)

    # host threads
    lane_thread = np.full(len(trace.lanes), -1, np.int64)
    keys: dict[tuple[int, int], int] = {}
    pids: list[int] = []
    for ln in trace.lanes:
        if not ln.is_gpu and ln.pid != -1:
            k = keys.setdefault((ln.pid, ln.tid), len(keys))
            if k == len(pids):
                pids.append(ln.pid)
            lane_thread[ln.id] = k
    thread = lane_thread[trace.lane]

    gr = graph(trace)
    bc, bo = gr.blocking, gr.awaited
    by_end = np.argsort(end[bc], kind="stable")
    bc, bo = bc[by_end], bo[by_end]
    b_start, b_end = start[bc].astype(np.int64), end[bc].astype(np.int64)
    o_end = end[bo].astype(np.int64)
    b_wait = np.clip(o_end - b_start, 0, b_end - b_start)
    b_slack = np.maximum(0, b_start - o_end)
    return _Base(
        g, lane_rank, lane_lo, s, e, ov, r, call, arrive, wsrc, wov, anchor, thread,
        np.asarray(pids, np.int64), bc, b_start, b_end, pos[bo], b_wait, b_slack,
    )  # fmt: skip


# ---- host time taken off threads ---------------------------------------------------------


class _Deleted:
    """Host time taken off each thread, as disjoint keyed intervals (thread band * span + time)."""

    def __init__(self, thread: np.ndarray, s: np.ndarray, e: np.ndarray, t0: int, span: int) -> None:
        self.t0, self.span = t0, span
        ks = thread * span + (np.asarray(s, np.int64) - t0)
        ke = thread * span + (np.asarray(e, np.int64) - t0)
        ok = ke > ks
        self.s, self.e = _union(ks[ok], ke[ok])
        self.cum = np.concatenate(([0], np.cumsum(self.e - self.s)))

    def key(self, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
        return np.asarray(thread, np.int64) * self.span + (np.clip(np.asarray(t, np.int64), self.t0, None) - self.t0)

    def before(self, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Deleted time on ``thread`` before ``t`` (counted from the thread's band start)."""
        q = self.key(thread, t)
        band = np.asarray(thread, np.int64) * self.span
        return self._upto(q) - self._upto(band)

    def _upto(self, q: np.ndarray) -> np.ndarray:
        if self.s.size == 0:
            return np.zeros(np.shape(q), np.int64)
        k = np.searchsorted(self.s, q, "right")
        last = np.maximum(k - 1, 0)
        part = np.where(k > 0, np.clip(q - self.s[last], 0, self.e[last] - self.s[last]), 0)
        return np.where(k > 0, self.cum[last] + part, 0)

    @property
    def total(self) -> int:
        return int(self.cum[-1])


def _union(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if s.size == 0:
        return s, e
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    reach = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    ends = np.maximum.reduceat(e, idx)
    return s[idx], ends


def _subtract(s: np.ndarray, e: np.ndarray, cut_s: np.ndarray, cut_e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals [s, e) minus the union of [cut_s, cut_e) (all keyed; result disjoint)."""
    s, e = _union(s, e)
    cs, ce = _union(cut_s, cut_e)
    if s.size == 0 or cs.size == 0:
        return s, e
    # boundaries of the kept set: the sweep over +1 (interval) and -1 (cut) coverage
    t = np.concatenate((s, e, cs, ce))
    d = np.concatenate((np.ones(s.size), -np.ones(e.size), -np.ones(cs.size) * 2, np.ones(ce.size) * 2))
    o = np.lexsort((d, t))
    t, d = t[o], d[o]
    cov = np.cumsum(d)  # 1 inside an interval and outside every cut
    inside = cov == 1
    seg_s, seg_e = t[:-1][inside[:-1]], t[1:][inside[:-1]]
    keep = seg_e > seg_s
    return _union(seg_s[keep], seg_e[keep])


# ---- the replay ----------------------------------------------------------------------------


@dataclass
class Replay:
    """Old and new times of the GPU ops (in ``_Base.g`` order) and the host threads' shifts."""

    base: _Base
    snew: np.ndarray
    enew: np.ndarray
    base_shift: np.ndarray  # per blocking call (return order): its return's shift; index 0 = "none yet"
    deleted: _Deleted
    b_thread_exits: tuple  # ``_exit_lookup``: returns keyed by (thread, time), each thread's driver
    notes: list[str]

    def host_shift(self, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Shift of host points at ``t`` on ``thread`` (ns, negative = earlier)."""
        return _host_shift(self, np.asarray(thread, np.int64), np.asarray(t, np.int64))


def _exit_lookup(b: _Base, span: int, t0: int) -> tuple:
    """Blocking returns keyed by (thread, time), and each thread's *driver*: itself when it blocks, else the
    thread of its process that blocks most, or, when none of them blocks, the one that launches most
    (autograd's and DDP's threads are set going by it: they follow its shift at the same moment; the
    hand-off itself is not traced)."""
    bt = b.thread[b.b_call]
    by_thread = bt * span + (b.b_end - t0)
    o1 = np.argsort(by_thread, kind="stable")
    n_thr = b.thread_pid.size
    count = np.bincount(bt, minlength=n_thr) if bt.size else np.zeros(n_thr, np.int64)
    lt = b.thread[b.call[b.call >= 0]]
    launches = np.bincount(lt[lt >= 0], minlength=n_thr) if lt.size else np.zeros(n_thr, np.int64)
    driver = np.where(count > 0, np.arange(n_thr), -1)
    for pid in np.unique(b.thread_pid).tolist():
        mine = np.flatnonzero(b.thread_pid == pid)
        best = mine[np.argmax(count[mine])] if count[mine].max() > 0 else mine[np.argmax(launches[mine])]
        if count[best] > 0 or launches[best] > 0:
            driver[best] = best
            driver[mine[count[mine] == 0]] = best
    return by_thread[o1], o1, driver


def _latest_exit(lk: tuple, thread: np.ndarray, t: np.ndarray, span: int, t0: int) -> np.ndarray:
    """Index (return order) of the latest blocking return at or before ``t`` on the thread's driver, -1."""
    keys, order, driver = lk
    out = np.full(thread.size, -1, np.int64)
    if keys.size == 0 or thread.size == 0:
        return out
    group = np.where(thread >= 0, driver[np.maximum(thread, 0)], -1)
    ok = group >= 0
    q = group[ok] * span + (np.clip(t[ok], t0, None) - t0)
    k = np.searchsorted(keys, q, "right") - 1
    hit = (k >= 0) & (keys[np.maximum(k, 0)] // span == group[ok])
    out[ok] = np.where(hit, order[np.maximum(k, 0)], -1)
    return out


def _static_shift(
    b: _Base, deleted: _Deleted, lk: tuple, thread: np.ndarray, t: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(latest return on the driver, host time taken off since it) for host points at ``t`` on ``thread``.

    The shift of the point is ``base_shift[kk + 1] - lost``: the return's own shift, less what the change
    took off the thread (and, for a thread that follows a driver, off the driver) since that return.
    """
    kk = _latest_exit(lk, thread, t, deleted.span, deleted.t0)
    th = np.maximum(thread, 0)
    ref = np.where(kk >= 0, b.b_end[np.maximum(kk, 0)] if b.b_end.size else 0, deleted.t0)
    drv = lk[2][th] if lk[2].size else th
    band = np.where(drv >= 0, drv, th)  # the process's timeline (``replay`` files every deletion there)
    lost = deleted.before(band, t) - deleted.before(band, ref)
    return kk, np.where(thread >= 0, lost, 0)


def _host_shift(rp: Replay, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
    kk, lost = _static_shift(rp.base, rp.deleted, rp.b_thread_exits, thread, t)
    return np.where(thread >= 0, rp.base_shift[kk + 1] - lost, 0)


def replay(trace: Trace, changes: list[Change]) -> tuple[Replay, list[dict]]:
    """Replay the trace's graph with ``changes``; also what each change touched (for ``changes``)."""
    b = _base(trace)
    t0 = int(trace.start_ns.min()) if len(trace) else 0
    span = (int(trace.end_ns.max()) - t0 + 2) if len(trace) else 2
    n_threads = max(int(b.thread_pid.size), 1)
    if n_threads * span >= (1 << 62):
        raise TraceError("trace too long for the what-if replay's time keys")
    d = b.e - b.s
    dnew = d.copy()
    rnew = b.r.copy()
    described: list[dict] = []
    notes: list[str] = []
    del_thread: list[np.ndarray] = []
    del_s: list[np.ndarray] = []
    del_e: list[np.ndarray] = []
    unblock = np.zeros(b.b_call.size, dtype=bool)
    for ch in changes:
        if ch.kind == "scale":
            hit = _match(trace, b.g, ch.target)
            dnew[hit] = np.round(d[hit] * ch.factor).astype(np.int64)
            described.append(
                {"kind": "scale", "glob": ch.target, "factor": ch.factor, "ops": int(hit.sum()),
                 "gpu_ns": int(d[hit].sum()), "gpu_ns_after": int(dnew[hit].sum())}
            )  # fmt: skip
        elif ch.kind == "graph":
            th, s0, s1, desc, graphed = _graph_instances(trace, b, ch.target)
            del_thread.append(th)
            del_s.append(s0)
            del_e.append(s1)
            rnew[graphed] = np.minimum(rnew[graphed], GRAPH_NODE_GAP_NS)  # back to back, a node's gap apart
            described.append(desc)
        else:
            th, s0, s1, desc, ub, off_stream = _removal(trace, b, ch.target, ch.every)
            del_thread.append(th)
            del_s.append(s0)
            del_e.append(s1)
            unblock |= ub
            dnew[off_stream] = 0  # prefetched on a side stream: no longer in this stream's order
            described.append(desc)
    cat = np.concatenate
    ds = cat(del_s) if del_s else np.empty(0, np.int64)
    de = cat(del_e) if del_e else np.empty(0, np.int64)
    dt = cat(del_thread) if del_thread else np.empty(0, np.int64)
    # time blocked in a call waiting for the device is not host work: never taken off
    bt = b.thread[b.b_call]
    keyed = _Deleted(np.empty(0, np.int64), ds[:0], de[:0], t0, span)
    wait_s, wait_e = keyed.key(bt, b.b_start), keyed.key(bt, b.b_start + b.b_wait)
    lk = _exit_lookup(b, span, t0)
    # One timeline per process: what a change takes off any of its threads, its driver gets too (the thread
    # that calls ``backward`` waits for autograd's; autograd's is set going by it), so every thread of the
    # process shifts by the union of what came off them (``_static_shift`` reads the driver's band).
    drv = lk[2]
    own_s, own_e = _subtract(keyed.key(dt, ds), keyed.key(dt, de), wait_s, wait_e)
    own_t = own_s // span
    mapped = np.where(drv[own_t] >= 0, drv[own_t], own_t) if own_t.size else own_t
    ks = mapped * span + own_s % span
    ke = mapped * span + (own_e - own_t * span)
    deleted = _Deleted(ks // span, ks % span + t0, ke % span + t0, t0, span)
    removes = [d for d in described if d["kind"] in ("remove", "graph")]
    for desc, th, s0, s1 in zip(removes, del_thread, del_s, del_e, strict=True):
        mine_s, mine_e = _subtract(keyed.key(th, s0), keyed.key(th, s1), wait_s, wait_e)
        desc["host_ns"] = int((mine_e - mine_s).sum())  # this change's own; changes may overlap
    rp = Replay(
        b, np.empty(0, np.int64), np.empty(0, np.int64), np.zeros(b.b_call.size + 1, np.int64), deleted, lk, notes
    )
    _run(rp, dnew, rnew, unblock, span, t0)
    return rp, described


def _match(trace: Trace, g: np.ndarray, glob: str) -> np.ndarray:
    ids = trace.name_id[g]
    used = np.unique(ids)
    ok = np.asarray([fnmatch.fnmatchcase(trace.names[int(i)], glob) for i in used.tolist()], dtype=bool)
    table = np.zeros(len(trace.names), dtype=bool)
    table[used[ok]] = True
    return table[ids]


def island_min_ns(trace: Trace) -> int:
    """The host-island smell's own bound (``analysis.smells``): a host gap shorter than this between two
    launches is the launch loop's per-op overhead (Python, dispatch), not an island."""
    from gaplens.analysis.smells import ISLAND_MIN_NS, ISLAND_STEP_SHARE
    from gaplens.analysis.steps import steps

    return max(int(ISLAND_STEP_SHARE * steps(trace).step_ns), ISLAND_MIN_NS)


def _regions_of(trace: Trace, cols, cause: str, every: bool = False) -> np.ndarray:
    """Blank regions whose host time ``--remove cause`` takes off (indices into ``cols``).

    ``host`` is the host islands (host-cause regions at least ``island_min_ns``); ``launch`` is the slow
    launch loop: launch-cause regions and the shorter host-cause gaps between its launches (what a CUDA
    graph or a fused kernel takes away with the launches). ``sync`` and ``copy``: the regions of that cause.
    ``every``: host-cause regions of every size (the guided reading's "host work" group).
    """
    from gaplens.analysis.gaps import CAUSES

    if every and cause == "host":
        return np.flatnonzero(cols.cause == CAUSES.index("host"))

    dur = cols.end_ns - cols.start_ns
    host = cols.cause == CAUSES.index("host")
    if cause == "host":
        return np.flatnonzero(host & (dur >= island_min_ns(trace)))
    if cause == "launch":
        return np.flatnonzero((cols.cause == CAUSES.index("launch")) | (host & (dur < island_min_ns(trace))))
    return np.flatnonzero(cols.cause == CAUSES.index(cause))


def _region_host_time(trace: Trace, b: _Base, cols, sel: np.ndarray):
    """(threads, starts, ends) of the launching threads' time in the regions ``sel``, each from the region's
    start until the next op's launch handed it over (copy/sync calls enqueue at entry; launches when they
    return); and how many regions had no traced launching thread."""
    from gaplens.analysis.calls import Call, api_class

    nxt = cols.next_op[sel]
    call = np.where(nxt >= 0, trace.launch[np.maximum(nxt, 0)], -1)
    has = call >= 0
    c = call[has]
    g0 = cols.start_ns[sel][has]
    cls = api_class(trace)[c]
    handed = np.where(cls >= Call.COPY, trace.start_ns[c], trace.end_ns[c])
    g1 = np.minimum(cols.end_ns[sel][has], handed)
    th = b.thread[c]
    okt = th >= 0
    return th[okt], g0[okt], g1[okt], cols.end_ns[sel][has][okt], int((~has).sum() + (~okt).sum())


def _until_launching_op(trace: Trace, b: _Base, th: np.ndarray, g0: np.ndarray, g1: np.ndarray) -> np.ndarray:
    """Each island's end, cut where the first CPU op that issues GPU work starts inside it: from there on the
    thread is making the next op (a compiled or graphed call's own host overhead, the dispatcher), which no
    fix of the island takes away (``--remove host`` keeps it). The user's ranges do not cut: a step range
    that begins inside an island marks time, it does no work."""
    from gaplens.analysis.calls import Call, api_class

    if th.size == 0:
        return g1
    t0 = int(trace.start_ns.min())
    span = int(trace.end_ns.max()) - t0 + 2
    queue = np.flatnonzero((api_class(trace) >= Call.LAUNCH) & (b.thread >= 0))
    qk = np.sort(b.thread[queue] * span + (trace.start_ns[queue] - t0))
    ops = np.flatnonzero((trace.kind == int(Kind.CPU_OP)) & (b.thread >= 0))
    os_ = b.thread[ops] * span + (trace.start_ns[ops] - t0)
    oe = b.thread[ops] * span + (trace.end_ns[ops] - t0)
    issues = np.searchsorted(qk, oe, "right") > np.searchsorted(qk, os_, "left")
    starts = np.sort(os_[issues])
    if starts.size == 0:  # no CPU op issues work (no CPU ops recorded, or nsys): the islands stay whole
        return g1
    q = th * span + (g0 - t0)
    k = np.searchsorted(starts, q, "right")  # the first issuing op starting after the island began
    nxt = np.where(k < starts.size, starts[np.minimum(k, starts.size - 1)], np.iinfo(np.int64).max)
    same = (nxt // span) == th
    cut = np.where(same, nxt - th * span + t0, g1)
    return np.minimum(g1, np.maximum(cut, g0))


def _calls_of(trace: Trace, b: _Base, cls_: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(threads, starts, ends) of every API call of class ``cls_`` on a traced host thread."""
    from gaplens.analysis.calls import api_class

    idx = np.flatnonzero(api_class(trace) == cls_)
    idx = idx[b.thread[idx] >= 0]
    return b.thread[idx], trace.start_ns[idx].astype(np.int64), trace.end_ns[idx].astype(np.int64)


def _pipeline_time(trace: Trace, b: _Base) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(threads, starts, ends) of the input pipeline inside the steps: the step thread waiting for (or
    making) its next batch (``analysis.causes.INPUT_PIPELINE``: a DataLoader's ``__next__``)."""
    from gaplens.analysis.causes import INPUT_PIPELINE
    from gaplens.analysis.steps import steps

    ids = [i for i, nm in enumerate(trace.names) if INPUT_PIPELINE.search(nm)]
    st = steps(trace)
    empty = np.empty(0, np.int64)
    if not ids or not st:
        return empty, empty, empty
    ev = np.flatnonzero(np.isin(trace.name_id, ids) & (b.thread >= 0) & (trace.kind != int(Kind.CUDA_API)))
    h0 = np.asarray([a for a, _ in st.host_spans], np.int64)
    h1 = np.asarray([z for _, z in st.host_spans], np.int64)
    s, e = trace.start_ns[ev].astype(np.int64), trace.end_ns[ev].astype(np.int64)
    k = np.searchsorted(h0, s, "right") - 1  # the step holding each fetch (steps do not overlap)
    ok = (k >= 0) & (s < h1[np.maximum(k, 0)])
    return b.thread[ev][ok], s[ok], np.minimum(e, h1[np.maximum(k, 0)])[ok]


def _off_stream_copies(trace: Trace, b: _Base, cols, sel: np.ndarray) -> np.ndarray:
    """Positions in ``b.g`` of host<->device copies inside the regions ``sel`` that sit on a stream which also
    runs compute: ``--remove copy`` takes them out of that stream's order (prefetched on a side stream)."""
    from gaplens.analysis.busy import compute_mask

    out = np.zeros(b.g.size, dtype=bool)
    if sel.size == 0 or b.g.size == 0:
        return out
    host_link = np.isin(trace.kind[b.g], (int(Kind.MEMCPY_HTOD), int(Kind.MEMCPY_DTOH)))
    compute_lanes = np.unique(trace.lane[np.flatnonzero(compute_mask(trace))])
    on_compute = np.isin(trace.lane[b.g], compute_lanes)
    r0, r1 = _union(cols.start_ns[sel].astype(np.int64), cols.end_ns[sel].astype(np.int64))
    k = np.searchsorted(r0, b.e, "left") - 1  # the last region starting before the copy ends
    overlaps = (k >= 0) & (b.s < r1[np.maximum(k, 0)])
    return host_link & on_compute & overlaps


def _removal(trace: Trace, b: _Base, cause: str, every: bool = False):
    """(threads, starts, ends) of host time to take off, a description, the blocking calls that stop waiting,
    and the GPU ops (positions in ``b.g``) that leave their stream's order."""
    from gaplens.analysis.calls import Call, api_class
    from gaplens.analysis.gaps import gap_columns

    cols = gap_columns(trace)
    sel = _regions_of(trace, cols, cause, every)
    unblock = np.zeros(b.b_call.size, dtype=bool)
    off_stream = np.zeros(b.g.size, dtype=bool)
    empty = np.empty(0, np.int64)
    th, g0, g1, region_end, untraced = empty, empty, empty, empty, 0
    pipeline_ns = None
    if cause in ("host", "launch", "copy"):
        th, g0, g1, region_end, untraced = _region_host_time(trace, b, cols, sel)
    if cause == "host" and not every:
        g1 = _until_launching_op(trace, b, th, g0, g1)
    if cause == "host" and not every:
        pt, ps, pe = _pipeline_time(trace, b)
        pipeline_ns = int((pe - ps).sum())
        th, g0, g1 = np.concatenate((th, pt)), np.concatenate((g0, ps)), np.concatenate((g1, pe))
    if cause == "alloc":  # every memory-management call: a reused block costs nothing
        th, g0, g1 = _calls_of(trace, b, int(Call.ALLOC))
    if cause == "sync" and b.b_call.size:  # every synchronising call stops waiting; the host's work stays
        unblock = api_class(trace)[b.b_call] == Call.SYNC
    if cause in UNBLOCKS and b.b_call.size and th.size:
        bt = b.thread[b.b_call]
        mine = api_class(trace)[b.b_call] == UNBLOCKS[cause]
        for t in np.unique(th).tolist():  # per thread (a handful), vectorised over regions
            calls = np.flatnonzero(mine & (bt == t))
            if calls.size == 0:
                continue
            cs = b.b_start[calls]
            o = np.argsort(cs)
            calls, cs = calls[o], cs[o]
            ce = b.b_end[calls]
            m = th[: region_end.size] == t
            lo = np.searchsorted(ce, g0[: region_end.size][m], "right")
            hi = np.searchsorted(cs, region_end[m], "left")
            cover = np.zeros(calls.size + 1, np.int64)
            np.add.at(cover, lo, 1)
            np.add.at(cover, np.maximum(hi, lo), -1)
            unblock[calls[np.cumsum(cover)[:-1] > 0]] = True
    if cause == "copy":
        off_stream = _off_stream_copies(trace, b, cols, sel)
    on = cols.on_path[sel]
    dur = cols.end_ns[sel] - cols.start_ns[sel]
    desc = {
        "kind": "remove",
        "cause": cause,
        "island_min_ns": island_min_ns(trace) if cause in ("host", "launch") and not every else None,
        "regions": int(sel.size),
        "on_critical_path": int(on.sum()),
        "blank_ns": int(dur.sum()),
        "blank_on_path_ns": int(dur[on].sum()),
        "untraced_regions": untraced,
        "calls_unblocked": int(unblock.sum()),
        "calls_removed": int(th.size) if cause == "alloc" else None,
        "pipeline_ns": pipeline_ns,
        "copies_off_stream": int(off_stream.sum()) if cause == "copy" else None,
    }
    return th, g0, g1, desc, unblock, off_stream


def _graph_instances(trace: Trace, b: _Base, target: str):
    """``--graph TARGET``: the host time inside each instance to take off, a description, and the GPU ops
    (positions in ``b.g``) launched inside an instance. ValueError when TARGET names nothing or synchronises."""
    from gaplens.analysis.units import fmt_ns

    spans, pid, label = _instances(trace, target)
    if not spans:
        raise ValueError(f"--graph {target!r}: no step or phase of that name in the trace")
    h0 = np.asarray([a for a, _ in spans], np.int64)
    h1 = np.asarray([z for _, z in spans], np.int64)
    threads = np.flatnonzero(b.thread_pid == pid) if pid is not None else np.arange(b.thread_pid.size)
    # GPU ops launched inside an instance by a thread of the process: the graph's nodes
    has = b.call >= 0
    call = np.maximum(b.call, 0)
    c_start, c_end = trace.start_ns[call], trace.end_ns[call]
    kk = np.searchsorted(h0, c_start, "right") - 1
    graphed = has & np.isin(b.thread[call], threads) & (kk >= 0) & (c_start <= h1[np.maximum(kk, 0)])
    n = len(spans)
    # the blocking calls that waited inside an instance, on the process's threads: a graph cannot hold one, so
    # the capture goes around it (a read-back at the step's end, ``.item()`` of the token, stays eager)
    bt = b.thread[b.b_call]
    k = np.searchsorted(h0, b.b_start, "right") - 1
    blocks = np.isin(bt, threads) & (k >= 0) & (b.b_end <= h1[np.maximum(k, 0)]) & (b.b_wait > 0)
    bk, bs = k[blocks], b.b_start[blocks]
    o = np.lexsort((bs, bk))
    bk, bs = bk[o], bs[o]
    span_ns = int(h1.max() - h0.min()) + 1 if n else 1
    # each node's segment: its instance, then how many of the instance's blocking calls started before its launch
    seg_key = kk * (span_ns + 1) + np.clip(c_start - h0[np.maximum(kk, 0)], 0, span_ns)
    blk_key = bk * (span_ns + 1) + np.clip(bs - h0[np.maximum(bk, 0)], 0, span_ns)
    before = np.searchsorted(blk_key, seg_key, "left") - np.searchsorted(bk, kk, "left")
    seg = np.where(graphed, kk * (int(blocks.sum()) + 1) + before, -1)
    segs, inv = np.unique(seg[graphed], return_inverse=True)
    per_instance = np.bincount(segs // (int(blocks.sum()) + 1), minlength=n)
    if per_instance.max(initial=0) > MAX_GRAPHS_PER_INSTANCE:
        first = int(b.b_call[np.flatnonzero(blocks)[0]])
        raise ValueError(
            f"--graph {target}: {label} synchronises between its launches ({trace.name(first)}, "
            f"{blocks.sum() / n:.3g} per instance, waiting {fmt_ns(int(b.b_wait[blocks].sum() / n))} each): a CUDA "
            "graph cannot hold a blocking call; remove the synchronisations first (--remove sync)"
        )
    # each segment is captured from its first launch to its last: host work before the first and after the
    # last stays, as a capture leaves it
    cap0 = np.full(segs.size, np.iinfo(np.int64).max, np.int64)
    cap1 = np.full(segs.size, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(cap0, inv, c_start[graphed])
    np.maximum.at(cap1, inv, c_end[graphed])
    nodes = np.bincount(inv, minlength=segs.size).astype(np.int64)
    launch_ns = nodes * GRAPH_LAUNCH_NS_PER_NODE
    keep_until = np.minimum(cap0 + launch_ns, cap1)
    th = np.repeat(threads, segs.size)
    g0 = np.tile(keep_until, threads.size)
    g1 = np.tile(cap1, threads.size)
    desc = {
        "kind": "graph",
        "target": target,
        "label": label,
        "instances": len(spans),
        "ops": int(graphed.sum()),
        "host_ns_before": int((h1 - h0).sum()),
        "graph_launch_ns": int(launch_ns.sum()),
        "graphs": int(segs.size),
    }
    return th, g0, g1, desc, graphed


def _instances(trace: Trace, target: str) -> tuple[list[tuple[int, int]], int | None, str]:
    """Host spans of the instances ``--graph`` captures: the step owner's steps for ``step``, else the phases
    named ``target`` (whole name) or of the family ``target`` (``decode_step`` for ``decode_step 12``)."""
    from gaplens.analysis.phases import phases
    from gaplens.analysis.steps import steps

    if target == "step":
        st = steps(trace)
        return (
            ([(int(a), int(z)) for a, z in st.host_spans], st.pid, f"{st.label} (the step)") if st else ([], None, "")
        )
    family = re.compile(r"[\s#_-]*\d+$")
    found = [p for p in phases(trace) if p.name == target or family.sub("", p.name) == target]
    if not found:
        return [], None, ""
    pid = found[0].pid
    spans = sorted((int(p.host_start_ns), int(p.host_end_ns)) for p in found if p.pid == pid)
    outer = [spans[0]] if spans else []
    for a, z in spans[1:]:  # nested instances of one family: the outermost is the capture
        if a >= outer[-1][1]:
            outer.append((a, z))
    return outer, pid, target


def _run(rp: Replay, dnew: np.ndarray, rnew: np.ndarray, unblock: np.ndarray, span: int, t0: int) -> None:
    b = rp.base
    n = b.g.size
    enew = np.full(n, NEG, np.int64)  # in chunk order (below) until the end
    snew = np.full(n, NEG, np.int64)
    if n == 0:
        rp.snew, rp.enew = snew, enew
        return
    # launch arrivals: host shift = shift of the latest return + time taken off since
    has = b.call >= 0
    a_thread = np.where(has, b.thread[np.maximum(b.call, 0)], -1)
    kk, lost = _static_shift(b, rp.deleted, rp.b_thread_exits, a_thread, b.arrive)
    a_fix = np.where(has & (a_thread >= 0), b.arrive - lost, b.arrive)
    a_kk = np.where(has & (a_thread >= 0), kk + 1, 0)
    # blocking calls: what their return owes to their own thread
    nb = b.b_call.size
    bt = b.thread[b.b_call]
    prev, _ = _static_shift(b, rp.deleted, rp.b_thread_exits, bt, b.b_start)
    ref_b = np.where(prev >= 0, b.b_end[np.maximum(prev, 0)] if nb else 0, t0)
    host_off = (rp.deleted.before(bt, b.b_end) - rp.deleted.before(bt, ref_b) + b.b_wait).tolist()
    prev_l = (prev + 1).tolist()
    b_e_old = b.e[b.b_op].tolist() if nb else []
    b_slack = b.b_slack.tolist()
    unblock_l = unblock.tolist()
    # chunks: the ops that start between two consecutive returns, laid out chunk by chunk and, inside a
    # chunk, lane by lane (a segment): every scan below reads contiguous slices
    chunk = np.searchsorted(b.b_end, b.s, "right")
    perm = np.lexsort((b.s, b.lane_rank, chunk))
    inv = np.empty(n, np.int64)
    inv[perm] = np.arange(n)
    ch, lane = chunk[perm], b.lane_rank[perm]
    r, ov, dd = rnew[perm], b.ov[perm], dnew[perm]
    rd = r + dd
    ainc = np.maximum(0, rd - ov)
    anchor, wov = b.anchor[perm], b.wov[perm]
    lfix, lkk = a_fix[perm], a_kk[perm]
    ws = np.where(b.wsrc[perm] >= 0, inv[np.maximum(b.wsrc[perm], 0)], -1)
    new_seg = np.ones(n, dtype=bool)
    new_seg[1:] = (ch[1:] != ch[:-1]) | (lane[1:] != lane[:-1])
    seg_lo = np.flatnonzero(new_seg)
    seg_hi = np.append(seg_lo[1:], n)
    seg_of = np.cumsum(new_seg) - 1
    a_glob = np.cumsum(ainc)
    aseg = a_glob - (a_glob - ainc)[seg_lo][seg_of]  # the scan's A, restarted per segment
    seg_ptr = np.searchsorted(ch[seg_lo], np.arange(nb + 2), "left")
    has_w = np.zeros(seg_lo.size, dtype=bool)
    wmask = ws >= 0
    np.logical_or.at(has_w, seg_of[wmask], True)
    inner = np.zeros(nb + 1, dtype=bool)  # chunks where an op waits on another op of the same chunk
    inner[ch[wmask][ch[np.maximum(ws[wmask], 0)] == ch[wmask]]] = True
    seg_lane = lane[seg_lo].tolist()
    lo_l, hi_l, w_l = seg_lo.tolist(), seg_hi.tolist(), has_w.tolist()
    b_op_c = inv[b.b_op].tolist() if nb else []
    lane_x = np.full(b.lane_lo.size, NEG, np.int64)  # running max of new ends per lane, so far
    shift = rp.base_shift
    ectx = (r, ov, dd, rd, aseg, anchor, wov, lfix, lkk, ws, enew, snew, shift)

    def run_chunk(c: int) -> None:
        j0, j1 = int(seg_ptr[c]), int(seg_ptr[c + 1])
        if j0 == j1:
            return
        carries = [int(lane_x[seg_lane[j]]) for j in range(j0, j1)]
        for _ in range(MAX_WAIT_PASSES if inner[c] else 1):
            before = enew[lo_l[j0] : hi_l[j1 - 1]].copy() if inner[c] else None
            for j in range(j0, j1):
                lane_x[seg_lane[j]] = _segment(ectx, lo_l[j], hi_l[j], carries[j - j0], w_l[j])
            if before is None or np.array_equal(before, enew[lo_l[j0] : hi_l[j1 - 1]]):
                break
        else:
            if CUT_NOTE not in rp.notes:
                rp.notes.append(CUT_NOTE)

    for k in range(nb):
        run_chunk(k)
        cand = shift[prev_l[k]] - host_off[k]
        if not unblock_l[k]:
            o = b_op_c[k]
            cand = max(cand, int(enew[o]) - b_e_old[k] - b_slack[k])
        shift[k + 1] = cand
    run_chunk(nb)
    rp.snew, rp.enew = np.empty(n, np.int64), np.empty(n, np.int64)
    rp.snew[perm], rp.enew[perm] = snew, enew


def _segment(ectx: tuple, lo: int, hi: int, carry: int, waits: bool) -> int:
    """Replay one lane's ops [lo, hi) of one chunk: x_i = max(x_{i-1} + a_i, b_i) as a prefix max.

    x is the lane's running max of new ends; an op starts at max(x_{i-1} - its overlap, its launch's and
    its wait's new arrival) + its own latency. Returns x after the last op (the next segment's carry).
    """
    r, ov, dd, rd, aseg, anchor, wov, lfix, lkk, ws, enew, snew, shift = ectx
    sl = slice(lo, hi)
    bnd = np.maximum(lfix[sl] + shift[lkk[sl]], anchor[sl])
    if waits:
        w = ws[sl]
        bnd = np.maximum(bnd, np.where(w >= 0, enew[np.maximum(w, 0)] - wov[sl], NEG))
    a = aseg[sl]
    x = a + np.maximum(np.maximum.accumulate(bnd + rd[sl] - a), carry)
    x_prev = np.empty_like(x)
    x_prev[0] = carry
    x_prev[1:] = x[:-1]
    st = np.maximum(x_prev - ov[sl], bnd) + r[sl]
    snew[sl] = st
    enew[sl] = st + dd[sl]
    return int(x[-1])


# ---- steps and the answer -------------------------------------------------------------------


@dataclass
class _StepSet:
    label: str
    pid: int | None
    names: list[str]
    host: list[tuple[int, int]]  # host ranges
    spans: list[tuple[int, int]]  # the step owner's time: the range as CUDA events time it
    steady: list[int]


def _steps(trace: Trace) -> _StepSet:
    """The step owner's steps (``analysis.steps``); empty when the trace has none."""
    from gaplens.analysis.steps import steps

    st = steps(trace)
    if not st:
        return _StepSet("", None, [], [], [], [])
    return _StepSet(
        st.label,
        st.pid,
        list(st.names),
        [(int(a), int(z)) for a, z in st.host_spans],
        [(int(a), int(z)) for a, z in st.spans],
        [int(k) for k in st.steady],
    )


def _step_threads(trace: Trace, b: _Base, st: _StepSet) -> np.ndarray:
    """The host thread each step range ran on (the busiest launching thread when not found)."""
    out = np.full(len(st.host), -1, np.int64)
    want = set(st.names)
    ids = [i for i, nm in enumerate(trace.names) if nm in want]
    if ids:
        ev = np.flatnonzero(np.isin(trace.name_id, ids) & (b.thread >= 0))
        where = {
            (s, e): t
            for s, e, t in zip(
                trace.start_ns[ev].tolist(), trace.end_ns[ev].tolist(), b.thread[ev].tolist(), strict=True
            )
        }
        out[:] = [where.get(sp, -1) for sp in st.host]
    if (out < 0).any():
        launchers = b.thread[b.call[b.call >= 0]]
        launchers = launchers[launchers >= 0]
        out[out < 0] = int(np.bincount(launchers).argmax()) if launchers.size else -1
    return out


def _marker_times(trace: Trace, rp: Replay, lane: int, t: np.ndarray, t_new: np.ndarray) -> tuple:
    """M(t) and the predicted M'(t'): a marker enqueued at t runs after the work queued on ``lane`` before t.

    The same ops count before and after the change (queued before t in the trace); their new ends
    and the marker's new enqueue time t' give M'. As ``analysis.phases.MarkerClock``, by launch call start.
    """
    b = rp.base
    if lane < 0:
        return t, t_new
    on = np.flatnonzero(trace.lane[b.g] == lane)
    if on.size == 0:
        return t, t_new
    raw = trace.launch[b.g[on]]
    queued = np.where(raw >= 0, trace.start_ns[np.maximum(raw, 0)], b.s[on])
    o = np.argsort(queued, kind="stable")
    q = queued[o]
    reach_old = np.maximum.accumulate(b.e[on][o])
    reach_new = np.maximum.accumulate(rp.enew[on][o])
    k = np.searchsorted(q, t, "left")
    last = np.maximum(k - 1, 0)
    m_old = np.where(k > 0, np.maximum(t, reach_old[last]), t)
    m_new = np.where(k > 0, np.maximum(t_new, reach_new[last]), t_new)
    return m_old, m_new


def whatif(trace: Trace, changes: list[Change]) -> dict:
    """The ``whatif --json`` object (DESIGN.md § What-if and the gate).

    Step times are the step owner's (``analysis.steps``: each step range as CUDA events recorded
    at its start and end time it); each step also carries its host span, before and after.
    """
    from gaplens.analysis.busy import gpu_window
    from gaplens.analysis.phases import marker_clock

    rp, described = replay(trace, changes)
    b = rp.base
    w0, w1 = gpu_window(trace)
    measured_window = w1 - w0
    if b.g.size:
        predicted_window = int(rp.enew.max()) - int(rp.snew.min())
    else:
        predicted_window = measured_window
    st = _steps(trace)
    per_step: list[dict] = []
    med: dict[str, int | None] = {"m": None, "p": None, "mh": None, "ph": None}
    if st.host:
        th = _step_threads(trace, b, st)
        h0 = np.asarray([a for a, _ in st.host], np.int64)
        h1 = np.asarray([z for _, z in st.host], np.int64)
        n0 = h0 + rp.host_shift(th, h0)
        n1 = h1 + rp.host_shift(th, h1)
        clock = marker_clock(trace)
        m_old = np.zeros((2, h0.size), np.int64)
        m_new = np.zeros((2, h0.size), np.int64)
        lanes = np.asarray(
            [clock.stream_for(st.pid, int(a), int(z))[0] if st.pid is not None else -1 for a, z in st.host], np.int64
        )
        for lane in np.unique(lanes).tolist():  # per stream the steps were timed on (one or a few)
            k = np.flatnonzero(lanes == lane)
            mo, mn = _marker_times(trace, rp, lane, np.concatenate((h0[k], h1[k])), np.concatenate((n0[k], n1[k])))
            m_old[:, k], m_new[:, k] = mo.reshape(2, -1), mn.reshape(2, -1)
        measured = np.asarray([z - a for a, z in st.spans], np.int64)
        # the change moves the marker times; the owner's measured span stays the reference
        predicted = np.maximum(measured + (m_new[1] - m_old[1]) - (m_new[0] - m_old[0]), 0)
        host_pred = np.maximum(n1 - n0, 0)
        warm = set(range(len(st.host))) - set(st.steady)
        per_step = [
            {
                "name": nm,
                "measured_ns": int(m),
                "predicted_ns": int(p),
                "measured_host_ns": int(z - a),
                "predicted_host_ns": int(hp),
                "warmup": k in warm,
            }
            for k, (nm, m, p, (a, z), hp) in enumerate(
                zip(st.names, measured.tolist(), predicted.tolist(), st.host, host_pred.tolist(), strict=True)
            )
        ]
        use = st.steady or list(range(len(st.host)))
        med = {
            "m": int(np.median(measured[use])),
            "p": int(np.median(predicted[use])),
            "mh": int(np.median((h1 - h0)[use])),
            "ph": int(np.median(host_pred[use])),
        }
    return {
        "origin_ns": int(trace.meta.origin_ns),
        "changes": described,
        "window_ns": {"measured": int(measured_window), "predicted": int(predicted_window)},
        "steps": {
            "label": st.label,
            "count": len(st.host),
            "measured_median_ns": med["m"],
            "predicted_median_ns": med["p"],
            "measured_host_median_ns": med["mh"],
            "predicted_host_median_ns": med["ph"],
        },
        "per_step": per_step,
        "notes": _notes(rp, described, measured_window, predicted_window, med["m"], med["p"], st.label)
        + _comm_note(trace, rp),
    }


def _notes(rp, described, mw, pw, m_med, p_med, label) -> list[str]:
    from gaplens.analysis.units import fmt_ns

    notes = list(rp.notes)
    gain = (m_med - p_med) if m_med is not None and p_med is not None else mw - pw
    scale = m_med if m_med else mw
    no_gain = scale <= 0 or abs(gain) < NO_GAIN_SHARE * scale
    if not label:
        notes.append("the trace has no steps (no numbered user range family, no ProfilerStep#): window only")
    for d in described:
        notes += _assumed(d)
        if d["kind"] == "graph":
            if no_gain:
                notes.append(
                    f"no gain from --graph {d['target']}: the device, not the host, sets the pace inside "
                    f"{d['label']} ({d['ops']:,} ops in {d['instances']} instances)"
                )
            continue
        if d["kind"] == "remove":
            if d["regions"] == 0 and not (d.get("calls_unblocked") or d.get("calls_removed") or d.get("pipeline_ns")):
                if d["cause"] == "host" and d.get("island_min_ns"):
                    notes.append(
                        f"no host island (a host-cause blank region of at least {fmt_ns(d['island_min_ns'])}): "
                        "shorter host gaps between launches are the launch loop (--remove launch)"
                    )
                else:
                    notes.append(f"no blank region has cause {d['cause']}: nothing to remove")
                continue
            if d["untraced_regions"]:
                notes.append(
                    f"{d['untraced_regions']} of {d['regions']} {d['cause']} regions have no traced launching "
                    "thread: their host time stays"
                )
            if no_gain:
                if d["cause"] == "sync":
                    why = (
                        f"the {d['calls_unblocked']:,} synchronising calls no longer wait, but what follows them "
                        "still waits on the device: the host was not ahead of it"
                    )
                elif d["on_critical_path"] == 0:
                    why = (
                        f"none of the {d['regions']} {d['cause']} regions ({fmt_ns(d['blank_ns'])}) is on the "
                        "critical path: the device was waiting on other work, so the host time behind them "
                        "moves nothing that follows"
                    )
                elif not d.get("host_ns"):
                    # nothing came off a thread: "0 ns ... is absorbed" explained a gain that was never there
                    # (round-3 island_fault --remove copy)
                    why = f"no host time lies behind the {d['regions']} {d['cause']} regions: nothing came off a thread"
                else:
                    why = (
                        f"the {d['cause']} time taken off ({fmt_ns(d.get('host_ns') or 0)}) is absorbed before "
                        "the step ends: later work waits on the device or on a blocking call that did not move"
                    )
                if d["cause"] == "copy":  # the copies themselves run on the device: that is --scale's change
                    why += "; to model faster copies, scale them: --scale 'Memcpy*=F'"
                notes.append(f"no gain from --remove {d['cause']}: {why}")
        else:
            if d["ops"] == 0:
                notes.append(f"no GPU op matches {d['glob']!r}: nothing to scale")
            elif d["factor"] == 1:
                notes.append(f"--scale '{d['glob']}=1' changes nothing")
            elif no_gain:
                notes.append(
                    f"no gain from --scale '{d['glob']}={d['factor']:g}' ({d['ops']} ops, "
                    f"{fmt_ns(d['gpu_ns'])} -> {fmt_ns(d['gpu_ns_after'])}): they are off the critical path "
                    "(other streams carried the time, or the host set the pace)"
                )
    return notes


def _assumed(d: dict) -> list[str]:
    """What a change assumed, said once beside its prediction."""
    if d["kind"] == "graph":
        return [
            f"--graph {d['target']}: the {d['instances']} instances of {d['label']} run as {d['graphs']} graph "
            f"launches ({fmt_graph(d)}), captured between any read-back that stays eager; the {d['ops']:,} GPU ops "
            f"keep their durations and order, {GRAPH_NODE_GAP_NS} ns apart; assumes the capture holds no host-side "
            "branching and the inputs live in static buffers"
        ]
    if d["kind"] != "remove":
        return []
    cause = d["cause"]
    if cause == "host" and d.get("pipeline_ns"):
        return [
            "--remove host takes the step's wait for its next batch off too: assumes the input pipeline "
            "(more workers, prefetch) keeps up with the GPU"
        ]
    if cause == "sync":
        return [
            "--remove sync: the synchronising calls no longer wait and the host runs ahead; assumes nothing "
            "the host does next needs the value the sync read back"
        ]
    if cause == "alloc":
        return [
            f"--remove alloc: {d.get('calls_removed') or 0:,} memory-management calls cost what a caching "
            "allocator's reuse costs (nothing); assumes the memory is reused step to step"
        ]
    if cause == "copy" and d.get("copies_off_stream"):
        return [
            f"--remove copy: {d['copies_off_stream']:,} host<->device copies leave the compute stream, as if "
            "prefetched on a side stream a step ahead; assumes the copy engine and the host link are not shared"
        ]
    return []


def fmt_graph(d: dict) -> str:
    from gaplens.analysis.units import fmt_ns

    per = d["graph_launch_ns"] // max(d["graphs"], 1)
    return f"{fmt_ns(per)} of host time each, {GRAPH_LAUNCH_NS_PER_NODE} ns a node"


def _comm_note(trace: Trace, rp: Replay) -> list[str]:
    """Collectives moved by the change keep their recorded length: how long they waited is the peers' affair."""
    from gaplens.analysis.comm import comm_mask

    b = rp.base
    if b.g.size == 0:
        return []
    comm = comm_mask(trace)[b.g]
    if not (comm & (rp.enew != b.e)).any():
        return []
    return [
        "collectives moved by the change keep their recorded durations: a rank that arrives earlier may wait "
        "longer for its peers, which this trace does not show (read the job with gaplens ranks)"
    ]


def range_times(trace: Trace, changes: list[Change], pattern: str) -> list[tuple[str, int, int]]:
    """(name, measured, predicted) host span of every host range whose name matches ``pattern`` (a regex).

    For ranges other than the step owner's (``ProfilerStep#N`` inside ``train_step N``, say), timed on
    the host: the shift of their start and end on their own thread.
    """
    import re

    rx = re.compile(pattern)
    rp, _ = replay(trace, changes)
    b = rp.base
    ids = [i for i, nm in enumerate(trace.names) if rx.fullmatch(nm)]
    ev = np.flatnonzero(np.isin(trace.name_id, ids) & (b.thread >= 0) & (trace.kind != int(Kind.CUDA_API)))
    ev = ev[np.argsort(trace.start_ns[ev], kind="stable")]
    th = b.thread[ev]
    s0, s1 = trace.start_ns[ev].astype(np.int64), trace.end_ns[ev].astype(np.int64)
    p = (s1 + rp.host_shift(th, s1)) - (s0 + rp.host_shift(th, s0))
    return [
        (trace.name(int(i)), int(z - a), int(max(q, 0)))
        for i, a, z, q in zip(ev.tolist(), s0.tolist(), s1.tolist(), p.tolist(), strict=True)
    ]
