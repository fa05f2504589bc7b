"""The critical path: the chain of last-arriving dependencies from the window's end back to its start.

Edges (DESIGN.md § Definitions):
  host    program order on one CPU thread (host time is work: the thread was running)
  stream  the previous op on the same stream (the one that finished last)
  launch  API call -> the GPU op it queued (correlation id, ``trace.launch``)
  sync    GPU op end -> end of the blocking call that waited on it (synchronize
          calls; copy calls that returned only after their own copy finished)
  wait    cross-stream event wait, where recorded (Kineto ``cuda_sync`` "Stream Wait Event", nsys
          SYNCHRONIZATION + CUDA_EVENT rows; see ``analysis.waits``);
          a segment of kind ``wait`` also marks a long stream-order delay nothing recorded explains

A trace is a realised schedule: every node began when its last predecessor arrived.
Following the last arrival backwards from the latest GPU op in the window walks the
chain with zero slack on every edge, which is the longest path of the time-ordered
DAG. Choosing each node's last arrival is vectorised; the walk itself is one list
lookup per node on the path.

    thread  ──host──[launch]───────host────────[sync ...........]──host──[launch]
    stream                 ╲  ███ k1 ███ k2 ███ ───sync──╯                 ╲ ███ k3
    path    host → launch → k1 → k2 (stream) → sync → host → launch → k3

Nodes: node ``i < n`` is the end of event ``i``; node ``n + a`` is the entry of API call ``a``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from gaplens.analysis.busy import copy_mask, gpu_window, gpu_work
from gaplens.analysis.calls import Call, api_class
from gaplens.analysis.comm import comm_mask
from gaplens.analysis.memo import per_trace
from gaplens.analysis.waits import latest_event_waits
from gaplens.loaders.model import Trace


class Edge(IntEnum):
    """The edge *into* a node: what made it wait (stored as int8 in ``Graph.edge`` and ``binding``)."""

    SOURCE = 0
    STREAM = 1
    LAUNCH = 2
    WAIT = 3
    SYNC = 4
    HOST = 5


class Seg(IntEnum):
    """What the path is doing during a stretch of time (stored as int8 in ``CriticalPath.seg_kind``)."""

    DEVICE = 0
    HOST = 1
    LAUNCH = 2
    QUEUE = 3
    SYNC = 4
    WAIT = 5


#: Launch-to-start latency up to this long is the launch path (host/driver overhead);
#: longer, the op sat queued behind something the trace does not show.
QUEUE_AS_LAUNCH_NS = 100_000
#: A pageable copy call returns once its last staging chunk is queued, so its copy may end this long after the
#: return and the call still waited on it: the last chunk's DMA (8-26 µs on the H200 recordings, 80-122 µs on
#: the 2020 PCIe 3 ResNet-50 traces).
PAGEABLE_TAIL_NS = 150_000
#: ... provided the call covered at least this share of its copy (only the last chunk runs after the return);
#: a small pageable copy that started after its call returned was not waited on.
PAGEABLE_COVER = 0.75


@dataclass
class Graph:
    """Each node's last-arriving predecessor, computed once per trace."""

    n: int
    pred: np.ndarray  # (2n,) node -> predecessor node, -1 at a source (int32 while 2n fits)
    edge: np.ndarray  # (2n,) int8 edge type into the node
    gpu: np.ndarray  # indices of GPU work events
    binding: np.ndarray  # (n,) for GPU ops: edge type that set their start (else -1)
    blocking: np.ndarray  # API calls whose end waited on a GPU op
    awaited: np.ndarray  # for each blocking call, the GPU op it waited on


def node_time(trace: Trace, nodes: np.ndarray) -> np.ndarray:
    """Time of each node: node i < n is event i's end, node n + i the start of call i.

    Computed for the nodes asked, not kept as a (2n,) column: the graph is kept for the trace's
    life (and pickled with its readings), and that column was a third of it.
    """
    n = len(trace)
    nodes = np.asarray(nodes, dtype=np.int64)
    entry = nodes >= n
    return np.where(entry, trace.start_ns[np.where(entry, nodes - n, 0)], trace.end_ns[np.where(entry, 0, nodes)])


@dataclass
class CriticalPath:
    """The path inside one window, as contiguous time segments."""

    window: tuple[int, int]
    nodes: np.ndarray  # node ids in time order
    seg_start_ns: np.ndarray
    seg_end_ns: np.ndarray
    seg_kind: np.ndarray
    seg_event: np.ndarray  # event index the segment belongs to (op, call or -1)

    def host_side(self) -> np.ndarray:
        """Mask of segments where the device waited on the host (host, launch, sync, short queue)."""
        k = self.seg_kind
        short_queue = (k == Seg.QUEUE) & ((self.seg_end_ns - self.seg_start_ns) <= QUEUE_AS_LAUNCH_NS)
        return (k == Seg.HOST) | (k == Seg.LAUNCH) | (k == Seg.SYNC) | short_queue

    def comm_side(self, trace: Trace) -> np.ndarray:
        """Mask of segments where the path ran through a communication kernel."""
        ev = self.seg_event
        return (self.seg_kind == Seg.DEVICE) & (ev >= 0) & comm_mask(trace)[np.maximum(ev, 0)]

    def copy_side(self, trace: Trace) -> np.ndarray:
        """Mask of segments where the path ran through a copy or memset on the device."""
        ev = self.seg_event
        return (self.seg_kind == Seg.DEVICE) & (ev >= 0) & copy_mask(trace)[np.maximum(ev, 0)]

    def time_in(self, starts: np.ndarray, ends: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Per interval [s, e): time the path spends in the masked segments (vectorised)."""
        m = self.host_side() if mask is None else mask
        s, e = self.seg_start_ns[m], self.seg_end_ns[m]
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        cum = np.concatenate(([0], np.cumsum(e - s)))

        def before(t: np.ndarray) -> np.ndarray:
            k = np.searchsorted(s, t, "right")
            last = np.maximum(k - 1, 0)
            part = np.where(k > 0, np.clip(t - s[last], 0, (e - s)[last] if s.size else 0), 0) if s.size else 0
            return np.where(k > 0, cum[last] + part, 0) if s.size else np.zeros_like(t)

        starts = np.asarray(starts, dtype=np.int64)
        ends = np.asarray(ends, dtype=np.int64)
        return before(ends) - before(starts)

    def events_of(self, kind: int) -> np.ndarray:
        return np.unique(self.seg_event[(self.seg_kind == kind) & (self.seg_event >= 0)])

    @property
    def gpu_ops(self) -> np.ndarray:
        return self.events_of(Seg.DEVICE)


@per_trace
def graph(trace: Trace) -> Graph:
    """The dependency graph of a trace (cached while the trace lives)."""
    g = build_graph(trace)
    return g


def build_graph(trace: Trace) -> Graph:
    """Every node's binding predecessor and edge kind (stream, launch, wait, sync, host).

    Kept whole (over 80 lines): each ``# ----`` section is one edge kind over the same sorted ops, and
    each reads the one before it (the stream order decides which launch and wait edges bind).
    """
    n = len(trace)
    start, end = trace.start_ns, trace.end_ns
    pred = np.full(2 * n, -1, dtype=np.int32 if 2 * n < 1 << 31 else np.int64)
    edge = np.zeros(2 * n, dtype=np.int8)
    binding = np.full(n, -1, dtype=np.int8)
    ops = gpu_work(trace)
    if ops.size == 0:
        return Graph(n, pred, edge, ops, binding, np.empty(0, np.int64), np.empty(0, np.int64))

    # Each step in a function of its own, so that its temporaries (op-sized columns, a dozen at once)
    # are gone before the next: this is the peak of a cold summary's readings.
    g, prev, prev_end = _stream_order(trace, ops)
    cls = api_class(trace)
    a, ok_launch, launch_t = _launch_times(trace, cls, g)
    launched = np.zeros(n, dtype=bool)  # the calls that launched ops, sorted and once each (np.unique sorts)
    launched[a[ok_launch]] = True
    calls = np.flatnonzero(launched)
    del launched
    p, et = _bindings(trace, ops, g, prev, prev_end, a, ok_launch, launch_t)
    del prev, prev_end, a, ok_launch, launch_t
    pred[g] = p
    edge[g] = et
    binding[g] = et
    del g, p, et

    # ---- sync: blocking calls end when the op they waited on ends -----------------
    blocking, awaited = _blocking_calls(trace, cls, ops, binding)
    pred[blocking] = awaited
    edge[blocking] = Edge.SYNC

    # ---- host program order: entry of a launch call <- latest blocking exit before it, on its
    # own thread; a thread that never blocked (autograd's, DDP's) was set going by its process's
    # other threads, so their latest blocking exit stands in (the cross-thread hand-off is not traced).
    if calls.size and blocking.size:
        k = _latest_before(trace.lane[blocking], end[blocking], trace.lane[calls], start[calls])
        lane_pid = np.asarray([ln.pid for ln in trace.lanes], dtype=np.int64)
        orphan = k < 0
        if orphan.any():
            pid_b, pid_c = lane_pid[trace.lane[blocking]], lane_pid[trace.lane[calls[orphan]]]
            k[orphan] = _latest_before(pid_b, end[blocking], pid_c, start[calls[orphan]])
        has = k >= 0
        pred[n + calls[has]] = blocking[k[has]]
        edge[n + calls[has]] = Edge.HOST
    return Graph(n, pred, edge, ops, binding, blocking, awaited)


def _stream_order(trace: Trace, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the ops in (lane, start) order, the previous op on the lane that finished last, its end)."""
    start, end = trace.start_ns, trace.end_ns
    order = np.lexsort((start[ops], trace.lane[ops]))
    g = ops[order]
    del order
    lane = trace.lane[g].astype(np.int64)
    e = end[g]
    new_lane = np.empty(g.size, dtype=bool)
    new_lane[0] = True
    new_lane[1:] = lane[1:] != lane[:-1]
    del lane
    rank = np.cumsum(new_lane) - 1
    span = int(e.max()) - int(e.min()) + 1
    shifted = (e - int(e.min())) + rank * span  # keeps a running max from crossing lanes
    del rank, e
    reach = np.maximum.accumulate(shifted)
    pos = np.maximum.accumulate(np.where(shifted == reach, np.arange(g.size), -1))
    del shifted, reach
    prev_pos = np.concatenate(([-1], pos[:-1]))
    del pos
    prev_pos[new_lane] = -1
    prev = np.where(prev_pos >= 0, g[np.maximum(prev_pos, 0)], -1)
    del prev_pos
    prev_end = np.where(prev >= 0, end[np.maximum(prev, 0)], np.iinfo(np.int64).min)
    return g, prev, prev_end


def _launch_times(trace: Trace, cls: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(each op's launch call, whether it is usable, when the call handed the op over).

    Copy and sync calls enqueue on entry and then block, so their work arrives at the
    call's start; a launch call hands its op over when it returns (never later than the op's start).
    """
    start, end = trace.start_ns, trace.end_ns
    a = trace.launch[g]
    a0 = np.maximum(a, 0)
    ok_launch = (a >= 0) & (start[a0] <= start[g])
    arrive = np.where(cls[a0] >= Call.COPY, start[a0], np.minimum(end[a0], start[g]))
    del a0
    launch_t = np.where(ok_launch, arrive, np.iinfo(np.int64).min)
    return a, ok_launch, launch_t


def _bindings(
    trace: Trace,
    ops: np.ndarray,
    g: np.ndarray,
    prev: np.ndarray,
    prev_end: np.ndarray,
    a: np.ndarray,
    ok_launch: np.ndarray,
    launch_t: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(predecessor node, edge type) of each op in ``g``: its stream, its launch or a cross-stream wait."""
    n, end = len(trace), trace.end_ns
    wait_src = np.full(g.size, -1, dtype=np.int64)
    dst, src = latest_event_waits(trace, ops)
    if dst.size:
        pos = np.empty(n, dtype=np.int64)
        pos[g] = np.arange(g.size)
        wait_src[pos[dst]] = src
        del pos
    known_t = np.maximum(prev_end, launch_t)
    infer_waits(trace, g, known_t, wait_src)
    wait_t = np.where(wait_src >= 0, end[np.maximum(wait_src, 0)], np.iinfo(np.int64).min)

    use_stream = (prev >= 0) & (prev_end >= launch_t)  # ties: the device set the pace
    use_launch = ~use_stream & ok_launch
    use_wait = (wait_src >= 0) & (wait_t > known_t)
    del wait_t, known_t
    p = np.where(use_stream, prev, np.where(use_launch, a + n, -1))
    et = np.where(use_stream, Edge.STREAM, np.where(use_launch, Edge.LAUNCH, Edge.SOURCE)).astype(np.int8)
    del use_stream, use_launch
    p = np.where(use_wait, wait_src, p)
    et = np.where(use_wait, Edge.WAIT, et).astype(np.int8)
    return p, et


def infer_waits(trace: Trace, g: np.ndarray, known_t: np.ndarray, wait_src: np.ndarray) -> None:
    """Cross-stream waits the trace did not record, inferred in place into ``wait_src``.

    An op that started long after both its stream predecessor and its launch, within
    ``QUEUE_AS_LAUNCH_NS`` of an op on another stream of its device ending, waited on that op
    (DDP's compute stream waiting for the NCCL stream's all-reduce, without cuda_sync rows).
    """
    start, end = trace.start_ns, trace.end_ns
    delayed = np.flatnonzero((wait_src < 0) & (start[g] - known_t > QUEUE_AS_LAUNCH_NS))
    if delayed.size == 0:
        return
    dev = trace.device_of_event()
    for d in np.unique(dev[g[delayed]]).tolist():
        mine = delayed[dev[g[delayed]] == d]
        ops = g[dev[g] == d]
        ops = ops[np.argsort(end[ops], kind="stable")]
        k = np.searchsorted(end[ops], start[g[mine]], "right") - 1
        cand = ops[np.maximum(k, 0)]
        ok = (
            (k >= 0)
            & (trace.lane[cand] != trace.lane[g[mine]])
            & (end[cand] > known_t[mine])
            & (start[g[mine]] - end[cand] <= QUEUE_AS_LAUNCH_NS)
        )
        wait_src[mine[ok]] = cand[ok]


def _blocking_calls(
    trace: Trace, cls: np.ndarray, ops: np.ndarray, binding: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Calls whose end was set by a GPU op: (call indices, the op each waited on).

    A synchronising call waited on the latest op that finished inside it. A copy call
    waited only when its own copy finished inside it (a pageable or synchronous copy), or,
    for a pageable copy, ended within ``PAGEABLE_TAIL_NS`` after it returned with most of the
    copy inside the call (the runtime returns once the last staging chunk is queued); an
    async copy that returns early waited on nothing.
    """
    start, end = trace.start_ns, trace.end_ns
    by_end = ops[np.argsort(end[ops], kind="stable")]
    ends_sorted = end[by_end]
    sync_calls = np.flatnonzero(cls == Call.SYNC)
    k = np.searchsorted(ends_sorted, end[sync_calls], "right") - 1
    ok = (k >= 0) & (ends_sorted[np.maximum(k, 0)] > start[sync_calls])
    calls = [sync_calls[ok]]
    waited = [by_end[k[ok]]]
    # Copy calls: their own copy ends inside the call, and either queued behind earlier
    # work or filled most of the call; a slow call around a short copy waited on nothing.
    copy_ops = ops[(trace.launch[ops] >= 0) & (cls[np.maximum(trace.launch[ops], 0)] == Call.COPY)]
    c = trace.launch[copy_ops]
    inside = (end[copy_ops] > start[c]) & (end[copy_ops] <= end[c])
    tail = end[copy_ops] - end[c]
    covered = np.minimum(end[copy_ops], end[c]) - np.maximum(start[copy_ops], start[c])
    last_chunk = (
        (tail > 0)
        & (tail <= PAGEABLE_TAIL_NS)
        & (covered >= PAGEABLE_COVER * (end[copy_ops] - start[copy_ops]))
        & _pageable(trace, copy_ops)
    )
    inside |= last_chunk
    queued = np.isin(binding[copy_ops], (Edge.STREAM, Edge.WAIT))
    long_copy = 2 * (end[copy_ops] - start[copy_ops]) >= end[c] - start[c]
    inside &= queued | long_copy
    if inside.any():
        calls.append(c[inside])
        waited.append(copy_ops[inside])
    call = np.concatenate(calls)
    op = np.concatenate(waited)
    # One awaited op per call: the latest-ending one.
    order = np.lexsort((end[op], call))
    call, op = call[order], op[order]
    last = np.ones(call.size, dtype=bool)
    last[:-1] = call[1:] != call[:-1]
    return call[last], op[last]


def _pageable(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """Copies whose name says a pageable end (both loaders name copies ``Memcpy HtoD (Pageable -> Device)``)."""
    ids = trace.name_id[ops]
    uniq = np.unique(ids)
    said = [int(i) for i in uniq.tolist() if "Pageable" in trace.names[int(i)]]
    return np.isin(ids, said)


def _latest_before(group_src: np.ndarray, t_src: np.ndarray, group_q: np.ndarray, t_q: np.ndarray) -> np.ndarray:
    """For each query, the index into src of the latest item of the same group with t_src <= t_q (-1 if none)."""
    t_src = np.asarray(t_src, np.int64)
    t_q = np.asarray(t_q, np.int64)
    lo = min(int(t_src.min()), int(t_q.min()))
    span = max(int(t_src.max()), int(t_q.max())) - lo + 1
    key_src = group_src.astype(np.int64) * span + (t_src - lo)
    key_q = group_q.astype(np.int64) * span + (t_q - lo)
    order = np.argsort(key_src, kind="stable")
    ks = key_src[order]
    k = np.searchsorted(ks, key_q, "right") - 1
    valid = (k >= 0) & (group_src[order[np.maximum(k, 0)]] == group_q)
    return np.where(valid, order[np.maximum(k, 0)], -1)


def critical_path(trace: Trace, window: tuple[int, int] | None = None) -> CriticalPath:
    """The critical path through ``window`` (default: first to last GPU activity; computed once per trace)."""
    if window is None:
        return _whole_path(trace)
    return _path(trace, window)


@per_trace
def _whole_path(trace: Trace) -> CriticalPath:
    """The default path, read by the blank regions, the smells and the export: its walk is one step per node
    (534k nodes, 0.4-0.6 s, on the sync-bound cloverleaf tiled to 1M events), so it is walked once."""
    return _path(trace, None)


def _path(trace: Trace, window: tuple[int, int] | None) -> CriticalPath:
    gr = graph(trace)
    w0, w1 = window if window is not None else gpu_window(trace)
    empty = np.empty(0, np.int64)
    if gr.gpu.size == 0 or w1 <= w0:
        return CriticalPath((w0, w1), empty, empty, empty, empty.astype(np.int8), empty)
    # The sink: of the ops running in the window, the one that ends last (clipped later).
    ends = trace.end_ns[gr.gpu]
    inside = (trace.start_ns[gr.gpu] < w1) & (ends > w0)
    if not inside.any():
        return CriticalPath((w0, w1), empty, empty, empty, empty.astype(np.int8), empty)
    cand = gr.gpu[inside]
    sink = int(cand[np.argmax(trace.end_ns[cand])])
    later = gr.gpu[trace.start_ns[gr.gpu] >= w1]
    if trace.end_ns[sink] < w1 and later.size:
        # The window ends in a blank region: follow the chain into the op that ends it.
        sink = int(later[np.argmin(trace.start_ns[later])])
    nodes = _walk(trace, gr, sink, w0)
    return _segments(trace, gr, nodes, w0, w1)


def _walk(trace: Trace, gr: Graph, sink: int, w0: int) -> np.ndarray:
    # Item by item: a path is thousands of nodes, the graph millions (tolist() cost 0.3 s at 1M events).
    pred = gr.pred
    n, start, end = gr.n, trace.start_ns, trace.end_ns
    out = []
    v = sink
    limit = pred.size + 1  # guards against a cycle from clock skew
    while v >= 0 and limit:
        out.append(v)
        if (end.item(v) if v < n else start.item(v - n)) <= w0:
            break
        v = pred.item(v)
        limit -= 1
    return np.asarray(out[::-1], dtype=np.int64)


def _segments(trace: Trace, gr: Graph, nodes: np.ndarray, w0: int, w1: int) -> CriticalPath:
    n = gr.n
    start, end = trace.start_ns, trace.end_ns
    v = nodes
    u = np.concatenate(([-1], nodes[:-1]))
    et = gr.edge[v].astype(np.int64)
    et[0] = Edge.SOURCE
    is_entry = v >= n
    ev = np.where(is_entry, v - n, v)
    is_gpu = ~is_entry & (gr.binding[ev] >= 0)
    is_exit = ~is_entry & ~is_gpu
    parts_s, parts_e, parts_k, parts_ev = [], [], [], []

    def add(mask: np.ndarray, s: np.ndarray, e: np.ndarray, kind: int, event: np.ndarray) -> None:
        parts_s.append(s[mask])
        parts_e.append(e[mask])
        parts_k.append(np.full(int(mask.sum()), kind, np.int8))
        parts_ev.append(event[mask])

    uu = np.maximum(u, 0)
    u_t = node_time(trace, uu)
    op_s, op_e = start[ev], end[ev]
    # Every GPU op on the path ran on the device.
    add(is_gpu, op_s, op_e, Seg.DEVICE, ev)
    # Stream order: device-side latency between two ops. A long one means the op waited
    # on a dependency the trace does not record (graph node, other process, unrecorded event).
    lat_long = (op_s - u_t) > QUEUE_AS_LAUNCH_NS
    add(is_gpu & (et == Edge.STREAM) & ~lat_long, u_t, op_s, Seg.DEVICE, ev)
    add(is_gpu & (et == Edge.STREAM) & lat_long, u_t, op_s, Seg.WAIT, ev)
    add(is_gpu & (et == Edge.WAIT), u_t, op_s, Seg.WAIT, ev)
    # Launch: the call until it returned, then the queue until the op started.
    call = np.maximum(uu - n, 0)
    call_end = np.minimum(end[call], op_s)
    add(is_gpu & (et == Edge.LAUNCH), start[call], call_end, Seg.LAUNCH, call)
    add(is_gpu & (et == Edge.LAUNCH), call_end, op_s, Seg.QUEUE, ev)
    # Sync: the blocking call returned after the op it waited on ended.
    add(is_exit & (et == Edge.SYNC), u_t, end[ev], Seg.SYNC, ev)
    # Host program order: from a blocking call's exit to the next launch call's entry.
    add(is_entry & (et == Edge.HOST), u_t, start[ev], Seg.HOST, ev)
    # The path began on the host (no earlier blocking call): host work from the window start.
    first_host = np.zeros(v.size, dtype=bool)
    first_host[0] = bool(is_entry[0]) or bool(is_exit[0])
    add(first_host, np.full(v.size, w0, np.int64), np.where(is_entry, start[ev], end[ev]), Seg.HOST, ev)

    s = np.clip(np.concatenate(parts_s), w0, w1)
    e = np.clip(np.concatenate(parts_e), w0, w1)
    k = np.concatenate(parts_k)
    evs = np.concatenate(parts_ev)
    keep = e > s
    s, e, k, evs = s[keep], e[keep], k[keep], evs[keep]
    order = np.lexsort((e, s))
    return CriticalPath((w0, w1), nodes, s[order], e[order], k[order], evs[order])


def binding_edges(trace: Trace) -> np.ndarray:
    """Per event: the ``Edge`` that set a GPU op's start (STREAM, LAUNCH, WAIT, SOURCE), -1 for non-GPU."""
    return graph(trace).binding
