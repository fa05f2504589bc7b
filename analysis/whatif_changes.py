"""What each what-if change selects: the host time it takes off threads, the calls that stop blocking, the GPU
ops that leave their stream or become a graph's nodes (``analysis.whatif`` says what each change models).
"""

from __future__ import annotations

import fnmatch
import re

import numpy as np

from gaplens.analysis.busy import compute_mask
from gaplens.analysis.calls import Call, api_class
from gaplens.analysis.gaps import CAUSES, gap_columns
from gaplens.analysis.phases import phases
from gaplens.analysis.replay import Base
from gaplens.analysis.smells import ISLAND_MIN_NS, ISLAND_STEP_SHARE
from gaplens.analysis.spans import union
from gaplens.analysis.steps import steps
from gaplens.analysis.thread_time import INPUT_PIPELINE
from gaplens.analysis.units import fmt_ns
from gaplens.loaders.model import Kind, Trace

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


def match_glob(trace: Trace, g: np.ndarray, glob: str) -> np.ndarray:
    ids = trace.name_id[g]
    used = np.unique(ids)
    ok = np.asarray([fnmatch.fnmatchcase(trace.names[int(i)], glob) for i in used.tolist()], dtype=bool)
    table = np.zeros(len(trace.names), dtype=bool)
    table[used[ok]] = True
    return table[ids]


def island_min_ns(trace: Trace) -> int:
    """The host-island smell's own bound (``analysis.smells``): a host gap shorter than this between two
    launches is the launch loop's per-op overhead (Python, dispatch), not an island."""

    return max(int(ISLAND_STEP_SHARE * steps(trace).step_ns), ISLAND_MIN_NS)


def regions_of(trace: Trace, cols, cause: str, every: bool = False) -> np.ndarray:
    """Blank regions whose host time ``--remove cause`` takes off (indices into ``cols``).

    ``host`` is the host islands (host-cause regions at least ``island_min_ns``); ``launch`` is the slow
    launch loop: launch-cause regions and the shorter host-cause gaps between its launches (what a CUDA
    graph or a fused kernel takes away with the launches). ``sync`` and ``copy``: the regions of that cause.
    ``every``: host-cause regions of every size (the guided reading's "host work" group).
    """

    if every and cause == "host":
        return np.flatnonzero(cols.cause == CAUSES.index("host"))

    dur = cols.end_ns - cols.start_ns
    host = cols.cause == CAUSES.index("host")
    if cause == "host":
        return np.flatnonzero(host & (dur >= island_min_ns(trace)))
    if cause == "launch":
        return np.flatnonzero((cols.cause == CAUSES.index("launch")) | (host & (dur < island_min_ns(trace))))
    return np.flatnonzero(cols.cause == CAUSES.index(cause))


def _region_host_time(trace: Trace, b: Base, cols, sel: np.ndarray):
    """(threads, starts, ends) of the launching threads' time in the regions ``sel``, each from the region's
    start until the next op's launch handed it over (copy/sync calls enqueue at entry; launches when they
    return); and how many regions had no traced launching thread."""

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


def _until_launching_op(trace: Trace, b: Base, th: np.ndarray, g0: np.ndarray, g1: np.ndarray) -> np.ndarray:
    """Each island's end, cut where the first CPU op that issues GPU work starts inside it: from there on the
    thread is making the next op (a compiled or graphed call's own host overhead, the dispatcher), which no
    fix of the island takes away (``--remove host`` keeps it). The user's ranges do not cut: a step range
    that begins inside an island marks time, it does no work."""

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


def _calls_of(trace: Trace, b: Base, cls_: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(threads, starts, ends) of every API call of class ``cls_`` on a traced host thread."""

    idx = np.flatnonzero(api_class(trace) == cls_)
    idx = idx[b.thread[idx] >= 0]
    return b.thread[idx], trace.start_ns[idx].astype(np.int64), trace.end_ns[idx].astype(np.int64)


def _pipeline_time(trace: Trace, b: Base) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(threads, starts, ends) of the input pipeline inside the steps: the step thread waiting for (or
    making) its next batch (``analysis.thread_time.INPUT_PIPELINE``: a DataLoader's ``__next__``)."""

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


def _off_stream_copies(trace: Trace, b: Base, cols, sel: np.ndarray) -> np.ndarray:
    """Positions in ``b.g`` of host<->device copies inside the regions ``sel`` that sit on a stream which also
    runs compute: ``--remove copy`` takes them out of that stream's order (prefetched on a side stream)."""

    out = np.zeros(b.g.size, dtype=bool)
    if sel.size == 0 or b.g.size == 0:
        return out
    host_link = np.isin(trace.kind[b.g], (int(Kind.MEMCPY_HTOD), int(Kind.MEMCPY_DTOH)))
    compute_lanes = np.unique(trace.lane[np.flatnonzero(compute_mask(trace))])
    on_compute = np.isin(trace.lane[b.g], compute_lanes)
    r0, r1 = union(cols.start_ns[sel].astype(np.int64), cols.end_ns[sel].astype(np.int64))
    k = np.searchsorted(r0, b.e, "left") - 1  # the last region starting before the copy ends
    overlaps = (k >= 0) & (b.s < r1[np.maximum(k, 0)])
    return host_link & on_compute & overlaps


def removal(trace: Trace, b: Base, cause: str, every: bool = False):
    """(threads, starts, ends) of host time to take off, a description, the blocking calls that stop waiting,
    and the GPU ops (positions in ``b.g``) that leave their stream's order."""

    cols = gap_columns(trace)
    sel = regions_of(trace, cols, cause, every)
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


def graph_instances(trace: Trace, b: Base, target: str, syncs_removed: bool = False):
    """``--graph TARGET``: the host time inside each instance to take off, a description, and the GPU ops
    (positions in ``b.g``) launched inside an instance. ValueError when TARGET names nothing or synchronises;
    with ``syncs_removed`` (``--remove sync`` in the same run) the synchronising calls are gone first and only
    the other blocking calls (synchronous copies) split or refuse the capture."""

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
    if syncs_removed:
        blocks &= api_class(trace)[b.b_call] != Call.SYNC
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
