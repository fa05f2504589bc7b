"""Why the device waited: split each blank region by what the launching thread was doing.

The thread that launched the next GPU op after a gap is the one the device waited
for. Every instant of that thread falls in the strongest class that covers it:

    sync    inside a synchronising call (or a CPU op that makes one: ``.item()``)
    copy    inside a copy call (or a CPU op that makes one: ``.to("cuda")``)
    launch  inside any other CUDA call, or a CPU op that issues GPU work
    host    anything else: Python, CPU ops with no CUDA calls, untraced time

    thread  ──py──[aten::mul [cudaLaunchKernel]]──py──[aten::item [memcpy][sync....]]
    class     host  launch                       host  sync (the op inherits its call)

Per class the covered time is a union with prefix sums, so any interval splits in
O(log n) and all gaps split at once. ``unknown`` is left for gaps whose next op has
no recorded launch (the trace lacks the CPU side), with what to capture instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gaplens.analysis.busy import BusySpans
from gaplens.analysis.calls import CAPTURE_HINT, HOST_UNSEEN_HINT, Call, api_class, has_cpu_side
from gaplens.analysis.memo import per_trace
from gaplens.loaders.model import Kind, LaneKind, Trace

CLASS_ORDER = ("sync", "copy", "launch", "host")
CAUSE_NAMES = (*CLASS_ORDER, "unknown")
UNKNOWN = len(CLASS_ORDER)
NO_LAUNCH_HINT = "the GPU op after this gap has no recorded launch call: its host thread was not traced"
NO_NEXT_HINT = "no GPU work follows this gap in the trace"
QUEUED_HINT = (
    "the next GPU op was queued before the gap began: the device waited on a dependency the trace "
    "does not record (an event or stream wait, a graph node, another process), not on this thread"
)


@dataclass
class ThreadTime:
    """Covered time of one host thread at each ``Call`` level (launch, copy, sync and above)."""

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
        levels = {}
        for lv in (Call.LAUNCH, Call.COPY, Call.SYNC):
            m = a_c >= lv
            starts = np.sort(a_s[m])
            # A CPU op takes the strongest class of the calls it makes.
            inside = np.searchsorted(starts, o_e, "right") - np.searchsorted(starts, o_s, "left") > 0
            levels[lv] = BusySpans(np.concatenate((a_s[m], o_s[inside])), np.concatenate((a_e[m], o_e[inside])))
        out[key] = ThreadTime(key[0], key[1], levels)
    return out


def next_ops(trace: Trace, device_ops: np.ndarray, gap_end: np.ndarray) -> np.ndarray:
    """For each gap end, the device op starting first at or after it (-1 if none)."""
    starts = trace.start_ns[device_ops]
    order = np.lexsort((trace.end_ns[device_ops], starts))
    s_sorted = starts[order]
    k = np.searchsorted(s_sorted, gap_end, "left")
    ok = k < s_sorted.size
    out = np.full(gap_end.size, -1, dtype=np.int64)
    out[ok] = device_ops[order[k[ok]]]
    # Prefer an op that records its launch when several start together.
    return out


def split_gaps(trace: Trace, starts: np.ndarray, ends: np.ndarray, nxt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k, 4) seconds-free split of each gap into sync/copy/launch/host, and the thread lane key index.

    Rows for gaps without a traced launching thread are all zero.
    """
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


def classify(
    trace: Trace, starts: np.ndarray, ends: np.ndarray, nxt: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per gap: cause code (index into ``CAUSE_NAMES``), (k, 4) shares in ``CLASS_ORDER``, message."""
    split, known = split_gaps(trace, starts, ends, nxt)
    dur = np.maximum(ends - starts, 1).astype(np.float64)
    frac = np.round(split / dur[:, None], 4)
    cause = np.where(known, np.argmax(split, axis=1), UNKNOWN).astype(np.int8)
    messages = [""] * starts.size
    # Queued before the gap: the launching thread is not what the device waited for.
    a = np.where(nxt >= 0, trace.launch[np.maximum(nxt, 0)], -1)
    queued = known & (a >= 0) & (trace.end_ns[np.maximum(a, 0)] <= starts)
    for i in np.flatnonzero(queued).tolist():
        messages[i] = QUEUED_HINT
    if "cpu_ops" in trace.meta.lacks:
        for i in np.flatnonzero(known & (cause == CLASS_ORDER.index("host"))).tolist():
            messages[i] = messages[i] or HOST_UNSEEN_HINT
    if not known.all():
        cpu = has_cpu_side(trace)
        for i in np.flatnonzero(~known).tolist():
            messages[i] = CAPTURE_HINT if not cpu else (NO_LAUNCH_HINT if nxt[i] >= 0 else NO_NEXT_HINT)
    return cause, frac, messages


def evidence(trace: Trace, start_ns: int, end_ns: int, nxt: int, limit: int = 8) -> list[int]:
    """Events that explain one gap: the next op's launch, blocking/copy calls, the widest CPU ops, the phase."""
    out: list[int] = []
    if nxt < 0:
        return out
    call = int(trace.launch[nxt])
    prev = _prev_op(trace, nxt, start_ns)
    if prev >= 0:
        out.append(prev)
    out.append(nxt)
    if call < 0:
        return out
    out.append(call)
    thread = trace.lanes[int(trace.lane[call])]
    cls = api_class(trace)
    scored: list[tuple[int, int]] = []
    annotations: list[tuple[int, int]] = []
    for ln in trace.lanes:
        if (ln.pid, ln.tid) != (thread.pid, thread.tid):
            continue
        for row in trace.rows_of(ln.id):
            idx = trace.window(row, start_ns, end_ns)
            if idx.size == 0:
                continue
            ov = np.minimum(trace.end_ns[idx], end_ns) - np.maximum(trace.start_ns[idx], start_ns)
            if ln.kind == LaneKind.CUDA_API:
                keep = cls[idx] >= Call.COPY
                scored += [(int(o) * 4, int(i)) for i, o in zip(idx[keep], ov[keep], strict=True)]
            elif ln.kind == LaneKind.CPU_OPS and int(trace.row_depth[row]) == 0:
                scored += [(int(o), int(i)) for i, o in zip(idx, ov, strict=True)]
            elif ln.kind == LaneKind.ANNOTATIONS:
                full = (trace.start_ns[idx] <= start_ns) | (ov >= (end_ns - start_ns) // 2)
                annotations += [(int(trace.row_depth[row]), int(i)) for i in idx[full]]
    scored.sort(reverse=True)
    out += [i for _, i in scored[: max(limit - len(out) - 1, 0)] if i != call]
    if annotations:
        out.append(max(annotations)[1])  # the innermost range: "during `tokenize`"
    return out[:limit]


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
