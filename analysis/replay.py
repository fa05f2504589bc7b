"""The what-if replay engine: the trace's dependency graph as arrays, host time taken off threads, the replay.

The trace is a realised schedule. Every node kept the slack it had to each of its predecessors; a change
moves some nodes, and a node moves earlier only when *all* its predecessors let it. Edges (as
``analysis.critical_path``):

    stream   an op starts after the ops before it on its stream   (start' = max(...) + its own latency)
    launch   ... and after its launch call handed it over         (the call moves with its host thread)
    wait     ... and after the op it waited on (recorded or inferred cross-stream waits)
    sync     a blocking call returns after the op it waited on ends, or after its own cost
    host     between blocking calls a thread runs freely: its points move with its last return,
             minus the host time a change took off its process (one timeline per process: the thread
             that calls ``backward`` waits for autograd's, autograd's is set going by it)

The replay walks the blocking calls in the order they returned (a few per step); between two returns
every GPU op is replayed at once, per stream, as a max-plus prefix scan (x_i = max(x_{i-1} + a_i, b_i)
is ``A_i + max.accumulate(b - A)``), so a 1M-event trace takes a Python step per blocking call and numpy
for the rest. What a change takes off or speeds up is ``analysis.whatif_changes``'; ``analysis.whatif``
puts them together and reads the steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gaplens.analysis.busy import gpu_work
from gaplens.analysis.calls import Call, api_class
from gaplens.analysis.critical_path import graph, infer_waits
from gaplens.analysis.memo import per_trace
from gaplens.analysis.spans import union
from gaplens.analysis.waits import latest_event_waits
from gaplens.loaders.model import Trace

#: "minus infinity" for int64 times: far below any trace time, far from overflow when added to.
NEG = -(1 << 62)


#: Replay passes over one batch of ops that wait on each other across streams (a chain of
#: cross-stream waits deeper than this inside one sync interval is cut, and noted).
MAX_WAIT_PASSES = 8


CUT_NOTE = (
    f"a chain of cross-stream waits deeper than {MAX_WAIT_PASSES} inside one sync interval was cut: "
    "ops at its end may be predicted early"
)


@dataclass
class Base:
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
def graph_base(trace: Trace) -> Base:

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
        infer_waits(trace, g, np.maximum(pe, arrive), inferred)
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
    return Base(
        g, lane_rank, lane_lo, s, e, ov, r, call, arrive, wsrc, wov, anchor, thread,
        np.asarray(pids, np.int64), bc, b_start, b_end, pos[bo], b_wait, b_slack,
    )  # fmt: skip


class Deleted:
    """Host time taken off each thread, as disjoint keyed intervals (thread band * span + time)."""

    def __init__(self, thread: np.ndarray, s: np.ndarray, e: np.ndarray, t0: int, span: int) -> None:
        self.t0, self.span = t0, span
        ks = thread * span + (np.asarray(s, np.int64) - t0)
        ke = thread * span + (np.asarray(e, np.int64) - t0)
        ok = ke > ks
        self.s, self.e = union(ks[ok], ke[ok])
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


def subtract(s: np.ndarray, e: np.ndarray, cut_s: np.ndarray, cut_e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals [s, e) minus the union of [cut_s, cut_e) (all keyed; result disjoint)."""
    s, e = union(s, e)
    cs, ce = union(cut_s, cut_e)
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
    return union(seg_s[keep], seg_e[keep])


@dataclass
class Replay:
    """Old and new times of the GPU ops (in ``Base.g`` order) and the host threads' shifts."""

    base: Base
    snew: np.ndarray
    enew: np.ndarray
    base_shift: np.ndarray  # per blocking call (return order): its return's shift; index 0 = "none yet"
    deleted: Deleted
    b_thread_exits: tuple  # ``_exit_lookup``: returns keyed by (thread, time), each thread's driver
    notes: list[str]

    def host_shift(self, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Shift of host points at ``t`` on ``thread`` (ns, negative = earlier)."""
        return _host_shift(self, np.asarray(thread, np.int64), np.asarray(t, np.int64))


def exit_lookup(b: Base, span: int, t0: int) -> tuple:
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


def static_shift(
    b: Base, deleted: Deleted, lk: tuple, thread: np.ndarray, t: np.ndarray
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
    kk, lost = static_shift(rp.base, rp.deleted, rp.b_thread_exits, thread, t)
    return np.where(thread >= 0, rp.base_shift[kk + 1] - lost, 0)


def run_replay(rp: Replay, dnew: np.ndarray, rnew: np.ndarray, unblock: np.ndarray, span: int, t0: int) -> None:
    """Lay out every op's new start and end (``rp.snew``, ``rp.enew``), chunk by chunk between blocking returns.

    Kept whole (over 80 lines): the hot loop (``run_chunk``) closes over a dozen arrays laid out for it in
    chunk order; split, they would travel as one tuple and the layout would sit away from its one reader.
    """
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
    kk, lost = static_shift(b, rp.deleted, rp.b_thread_exits, a_thread, b.arrive)
    a_fix = np.where(has & (a_thread >= 0), b.arrive - lost, b.arrive)
    a_kk = np.where(has & (a_thread >= 0), kk + 1, 0)
    # blocking calls: what their return owes to their own thread
    nb = b.b_call.size
    bt = b.thread[b.b_call]
    prev, _ = static_shift(b, rp.deleted, rp.b_thread_exits, bt, b.b_start)
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
