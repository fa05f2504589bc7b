"""Why the device waited: split each blank region by what filled it and what the launching thread did.

First what the device itself shows: time covered by communication kernels is ``comm`` (the
device waited on a peer or the network), time covered by the profiler's own overhead rows is
``profiler``. The rest is split by the thread that launched the next compute op, the one the
device waited for; every instant of it falls in the strongest class that covers it:

    sync    inside a synchronising call (or a CPU op that makes one: ``.item()``)
    copy    inside a copy call (or a CPU op that makes one: ``.to("cuda")``)
    launch  inside a launch call, or a short CPU op that issues one (dispatch overhead)
    host    anything else: Python, CPU ops with no CUDA calls, slow CPU ops, untraced time

    thread  ──py──[aten::mul [cudaLaunchKernel]]──py──[aten::item [memcpy][sync....]]
    class     host  launch                       host  sync (the op inherits its call)

A CPU op longer than ``DISPATCH_MAX_NS`` that launches work is host work, not launch overhead:
a first-call GEMM that spends 2 ms loading its module is a host island, not a picket fence.
Per class the covered time is a union with prefix sums, so all gaps split at once.
``unknown`` is left for gaps whose next op has no recorded launch (the trace lacks the host side).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gaplens.analysis.busy import BusySpans, device_splits, overhead_spans
from gaplens.analysis.calls import CAPTURE_HINT, HOST_UNSEEN_HINT, Call, api_class, has_cpu_side
from gaplens.analysis.comm import comm_mask
from gaplens.analysis.gaps import CAUSES, Gap
from gaplens.analysis.memo import per_trace
from gaplens.analysis.regions import Regions
from gaplens.loaders.model import Kind, LaneKind, Trace

#: A CPU op that issues GPU work and runs longer than this is host work, not dispatch overhead.
DISPATCH_MAX_NS = 100_000
THREAD_CLASSES = ("sync", "copy", "launch", "host")
NO_LAUNCH_HINT = "the GPU op after this gap has no recorded launch call: its host thread was not traced"
NO_NEXT_HINT = "no GPU work follows this gap in the trace"
QUEUED_HINT = (
    "the next GPU op was queued before the gap began: the device waited on a dependency the trace "
    "does not record (an event or stream wait, a graph node, another process), not on this thread"
)
IDLE_HINT = "nothing was asked of the device here (outside every phase, or no host work in flight)"
PROFILER_HINT = "the profiler's own work (buffer flushes, initialisation) covers most of this region: an artefact"
COMM_HINT = (
    "the device only ran communication here: it waited for a peer or the network "
    "(compare the ranks: gaplens ranks RANK_TRACES…)"
)


@dataclass
class ThreadTime:
    """Covered time of one host thread at each class level (Call.LAUNCH, Call.COPY, Call.SYNC and above)."""

    pid: int
    tid: int
    levels: dict[Call, BusySpans]

    def split(self, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """(k, 4) time in sync, copy, launch, host for each interval [s, e)."""
        s = np.asarray(s, np.int64)
        e = np.asarray(e, np.int64)
        at = {lv: _busy_between(self.levels[lv], s, e) for lv in (Call.LAUNCH, Call.COPY, Call.SYNC)}
        sync = at[Call.SYNC]
        copy = at[Call.COPY] - at[Call.SYNC]
        launch = at[Call.LAUNCH] - at[Call.COPY]
        host = (e - s) - at[Call.LAUNCH]
        return np.stack((sync, copy, launch, host), axis=1).clip(min=0)


def _busy_between(spans: BusySpans, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    if spans.start.size == 0:
        return np.zeros(s.size, dtype=np.int64)
    return spans.busy_before(e) - spans.busy_before(s)


@per_trace
def thread_times(trace: Trace) -> dict[tuple[int, int], ThreadTime]:
    """ThreadTime per (pid, tid) that made CUDA calls (cached while the trace lives)."""
    cls = api_class(trace)
    by_thread: dict[tuple[int, int], dict[LaneKind, int]] = {}
    for ln in trace.lanes:
        if ln.kind in (LaneKind.CUDA_API, LaneKind.CPU_OPS):
            by_thread.setdefault((ln.pid, ln.tid), {})[ln.kind] = ln.id
    out = {}
    for key, lanes in by_thread.items():
        if LaneKind.CUDA_API not in lanes:
            continue
        api = trace.lane_events(lanes[LaneKind.CUDA_API])
        a_s, a_e, a_c = trace.start_ns[api], trace.end_ns[api], cls[api]
        ops = trace.lane_events(lanes[LaneKind.CPU_OPS]) if LaneKind.CPU_OPS in lanes else slice(0, 0)
        is_op = trace.kind[ops] == int(Kind.CPU_OP)
        o_s, o_e = trace.start_ns[ops][is_op], trace.end_ns[ops][is_op]
        # Calls of each class or stronger that start inside each op: prefix counts over the calls
        # in start order, found with one pair of binary searches for all three levels.
        order = np.argsort(a_s, kind="stable")
        starts, classes = a_s[order], a_c[order]
        lo, hi = np.searchsorted(starts, o_s, "left"), np.searchsorted(starts, o_e, "right")
        short = (o_e - o_s) <= DISPATCH_MAX_NS
        levels = {}
        for lv in (Call.LAUNCH, Call.COPY, Call.SYNC):
            m = a_c >= lv
            before = np.concatenate(([0], np.cumsum(classes >= lv)))
            # A CPU op takes the strongest class of the calls it makes; for launches only while
            # it is short enough to be dispatch overhead.
            inside = before[hi] > before[lo]
            if lv == Call.LAUNCH:
                inside &= short
            levels[lv] = BusySpans(np.concatenate((a_s[m], o_s[inside])), np.concatenate((a_e[m], o_e[inside])))
        out[key] = ThreadTime(key[0], key[1], levels)
    return out


def next_compute_ops(trace: Trace, devices: np.ndarray, gap_end: np.ndarray) -> np.ndarray:
    """For each gap end, the compute op of that device starting first at or after it (-1 if none)."""
    out = np.full(gap_end.size, -1, dtype=np.int64)
    comm = comm_mask(trace)
    dev_of = trace.device_of_event()
    from gaplens.loaders.model import GPU_WORK_KINDS

    work = trace.mask(GPU_WORK_KINDS) & ~comm
    for dev in np.unique(devices).tolist():
        ops = np.flatnonzero(work & (dev_of == dev))
        m = devices == dev
        starts = trace.start_ns[ops]
        order = np.lexsort((trace.end_ns[ops], starts))
        s_sorted = starts[order]
        k = np.searchsorted(s_sorted, gap_end[m], "left")
        ok = k < s_sorted.size
        got = np.full(int(m.sum()), -1, dtype=np.int64)
        got[ok] = ops[order[k[ok]]]
        out[m] = got
    return out


def split_gaps(trace: Trace, starts: np.ndarray, ends: np.ndarray, nxt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k, 4) split of each gap into sync/copy/launch/host time, and whether its launching thread is known."""
    shares = np.zeros((starts.size, 4), dtype=np.int64)
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
    """Per gap: cause code (index into ``CAUSES``), (k, len(CAUSES)) shares, and a message."""
    starts, ends, devs = reg.start_ns, reg.end_ns, reg.device
    n = starts.size
    dur = np.maximum(ends - starts, 1).astype(np.float64)
    out = np.zeros((n, len(CAUSES)))
    col = {c: k for k, c in enumerate(CAUSES)}
    # What the device shows: communication first, then the profiler's own work.
    comm_ns = np.zeros(n)
    either_ns = np.zeros(n)
    prof = overhead_spans(trace)
    splits = device_splits(trace)
    for dev in np.unique(devs).tolist():
        m = devs == dev
        comm = splits[dev].comm
        comm_ns[m] = _busy_between(comm, starts[m], ends[m])
        both = BusySpans(np.concatenate((comm.start, prof.start)), np.concatenate((comm.end, prof.end)))
        either_ns[m] = _busy_between(both, starts[m], ends[m])
    out[:, col["comm"]] = comm_ns / dur
    out[:, col["profiler"]] = (either_ns - comm_ns) / dur
    rest = np.clip(1.0 - either_ns / dur, 0.0, 1.0)
    split, known = split_gaps(trace, starts, ends, nxt)
    frac = split / dur[:, None]
    total = np.maximum(frac.sum(axis=1), 1e-12)
    for k, c in enumerate(THREAD_CLASSES):
        out[:, col[c]] = np.where(known, rest * frac[:, k] / total, 0.0)
    out[:, col["unknown"]] = np.where(known, 0.0, rest)
    out[reg.idle] = 0.0
    out[reg.idle, col["idle"]] = 1.0
    out = np.round(out, 4)
    cause = np.argmax(out, axis=1).astype(np.int8)
    return cause, out, _messages(trace, reg, nxt, cause, known)


def _messages(trace: Trace, reg: Regions, nxt: np.ndarray, cause: np.ndarray, known: np.ndarray) -> list[str]:
    messages = [""] * len(reg)
    col = {c: k for k, c in enumerate(CAUSES)}
    for c, hint in (("idle", IDLE_HINT), ("profiler", PROFILER_HINT), ("comm", COMM_HINT)):
        for i in np.flatnonzero(cause == col[c]).tolist():
            messages[i] = hint
    starved = np.isin(cause, [col[c] for c in THREAD_CLASSES])
    # Queued before the gap: the launching thread is not what the device waited for.
    a = np.where(nxt >= 0, trace.launch[np.maximum(nxt, 0)], -1)
    queued = starved & known & (a >= 0) & (trace.end_ns[np.maximum(a, 0)] <= reg.start_ns)
    for i in np.flatnonzero(queued).tolist():
        messages[i] = QUEUED_HINT
    if "cpu_ops" in trace.meta.lacks:
        for i in np.flatnonzero(cause == col["host"]).tolist():
            messages[i] = messages[i] or HOST_UNSEEN_HINT
    unknown = np.flatnonzero(cause == col["unknown"])
    if unknown.size:
        cpu = has_cpu_side(trace)
        for i in unknown.tolist():
            messages[i] = CAPTURE_HINT if not cpu else (NO_LAUNCH_HINT if nxt[i] >= 0 else NO_NEXT_HINT)
    return messages


def evidence(trace: Trace, g: Gap, nxt: int, limit: int = 8) -> list[int]:
    """Events that explain one gap, the most telling first.

    Communication: the collectives running in it. Profiler: its overhead rows. Otherwise: the GPU
    ops around it, the next op's launch call, the deepest op its thread ran during the gap, the
    blocking or copy calls it sat in, and the innermost range ("during ``tokenize``").
    """
    if g.cause == "comm":
        return _overlapping(trace, g, comm_mask(trace), comm_rows(trace).get(g.device, []), limit)
    if g.cause == "profiler":
        return _overlapping(trace, g, trace.kind == int(Kind.OVERHEAD), overhead_rows(trace), limit)
    out: list[int] = []
    if nxt < 0:
        return out
    prev = _prev_op(trace, nxt, g.start_ns)
    if prev >= 0:
        out.append(prev)
    out.append(nxt)
    call = int(trace.launch[nxt])
    if call < 0 or g.cause == "idle":
        return out
    out.append(call)
    thread = trace.lanes[int(trace.lane[call])]
    cls = api_class(trace)
    calls: list[tuple[int, int]] = []
    ops: list[tuple[int, int, int]] = []  # (depth, overlap, event)
    annotations: list[tuple[int, int]] = []
    for ln in trace.lanes:
        if (ln.pid, ln.tid) != (thread.pid, thread.tid):
            continue
        for row in trace.rows_of(ln.id):
            idx = trace.window(row, g.start_ns, g.end_ns)
            if idx.size == 0:
                continue
            ov = np.minimum(trace.end_ns[idx], g.end_ns) - np.maximum(trace.start_ns[idx], g.start_ns)
            if ln.kind == LaneKind.CUDA_API:
                keep = cls[idx] >= Call.COPY
                calls += [(int(o), int(i)) for i, o in zip(idx[keep], ov[keep], strict=True)]
            elif ln.kind == LaneKind.CPU_OPS:
                depth = int(trace.row_depth[row])
                ops += [(depth, int(o), int(i)) for i, o in zip(idx, ov, strict=True)]
            elif ln.kind == LaneKind.ANNOTATIONS:
                full = (trace.start_ns[idx] <= g.start_ns) | (ov >= g.dur_ns // 2)
                annotations += [(int(trace.row_depth[row]), int(i)) for i in idx[full]]
    deepest = deepest_op(ops, g.dur_ns)
    if deepest >= 0:
        out.append(deepest)
    calls.sort(reverse=True)
    out += [i for _, i in calls[: max(limit - len(out) - 1, 0)] if i != call]
    if annotations:
        out.append(max(annotations)[1])  # the innermost range: "during `tokenize`"
    return list(dict.fromkeys(out))[:limit]


def deepest_op(ops: list[tuple[int, int, int]], gap_ns: int) -> int:
    """The deepest CPU op or frame that covers most of what the thread did during a gap.

    Of the ops overlapping the gap by at least half as much as the one overlapping it most,
    the deepest: the outermost frame (``<module>``, ``decorate_context``) always overlaps most
    and says nothing. An op grazing a quarter of the gap or less did not fill it: none then.
    """
    if not ops:
        return -1
    most = max(o for _, o, _ in ops)
    if 4 * most <= gap_ns:
        return -1
    near = [(d, o, i) for d, o, i in ops if 2 * o >= most]
    return max(near)[2]


def _overlapping(trace: Trace, g: Gap, mask: np.ndarray, rows: list[int], limit: int) -> list[int]:
    """Events of ``mask`` overlapping the gap, most overlap first: searched on ``rows``, the rows that hold them."""
    found = [trace.window(row, g.start_ns, g.end_ns) for row in rows]
    idx = np.sort(np.concatenate(found)) if found else np.empty(0, np.int64)
    idx = idx[mask[idx] & (trace.start_ns[idx] < g.end_ns) & (trace.end_ns[idx] > g.start_ns)]
    ov = np.minimum(trace.end_ns[idx], g.end_ns) - np.maximum(trace.start_ns[idx], g.start_ns)
    return idx[np.argsort(-ov, kind="stable")[:limit]].tolist()


def _rows_holding(trace: Trace, mask: np.ndarray) -> list[int]:
    rows = np.searchsorted(trace.row_offsets, np.flatnonzero(mask), "right") - 1
    return np.unique(rows).tolist()


@per_trace
def comm_rows(trace: Trace) -> dict[int, list[int]]:
    """Per device, the rows that hold communication ops (a gap's evidence is searched there, not in every event)."""
    out: dict[int, list[int]] = {}
    for row in _rows_holding(trace, comm_mask(trace)):
        out.setdefault(trace.lanes[int(trace.row_lane[row])].device, []).append(row)
    return out


@per_trace
def overhead_rows(trace: Trace) -> list[int]:
    """The rows that hold the profiler's own overhead events."""
    return _rows_holding(trace, trace.kind == int(Kind.OVERHEAD))


def _prev_op(trace: Trace, nxt: int, start_ns: int) -> int:
    """The GPU op that ended the busy span before the gap, on the same device."""
    dev = trace.lanes[int(trace.lane[nxt])].device
    best, best_end = -1, -1
    for ln in trace.gpu_lanes(dev):
        sl = trace.lane_events(ln.id)
        ends = trace.end_ns[sl]
        hit = np.flatnonzero(ends == start_ns)
        if hit.size and start_ns > best_end:
            best, best_end = sl.start + int(hit[0]), start_ns
    return best
