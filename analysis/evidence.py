"""The events that explain one blank region, the most telling first: what the step-5 reading and the viewer show.

Communication: the collectives running in it. Profiler: its overhead rows. Copies: the copies, then the
launching thread's side. Otherwise the GPU ops around the region, the next op's launch call, the deepest
op its thread ran during the region, the blocking, copy or allocation calls it sat in, and the innermost
range ("during ``tokenize``"). Why the device waited is ``analysis.causes``'; this is what shows it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gaplens.analysis.busy import copy_mask
from gaplens.analysis.calls import Call, api_class
from gaplens.analysis.comm import comm_mask
from gaplens.analysis.memo import per_trace
from gaplens.analysis.regions import Gap
from gaplens.analysis.wait_calls import record_call, recorded_waits, wait_call_before
from gaplens.loaders.model import Kind, LaneKind, Trace


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
    if g.cause == "copy":
        # The copies themselves are the evidence (DESIGN.md § Blank region), then the launching thread's side.
        rows = [r for ln in trace.gpu_lanes(g.device) for r in trace.rows_of(ln.id)]
        copies = _overlapping(trace, g, copy_mask(trace), rows, max(limit // 2, 1))
        rest = evidence(trace, dataclasses.replace(g, cause="host", shares={}, evidence=[], message=""), nxt, limit)
        return list(dict.fromkeys(copies + rest))[:limit]
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
    if g.cause == "dependency":
        # The wait where the trace shows it: the stream-wait row and the op it waited on; else the
        # launch call (a graph launch: a graph edge) and the last op of another stream ending in the gap.
        wait = recorded_waits(trace).get(nxt)
        if wait is not None:
            out += [wait[0], wait[1]]
            record = record_call(trace, wait[0])
            if record >= 0:
                out.append(record)
        else:
            other = _other_stream_op(trace, nxt, g)
            if other >= 0:
                out.append(other)
            w = int(wait_call_before(trace, np.asarray([nxt]))[0])
            if w >= 0:
                out.append(w)
        out.append(call)
        return list(dict.fromkeys(out))[:limit]
    out.append(call)
    thread = trace.lanes[int(trace.lane[call])]
    cls = api_class(trace)
    calls: list[tuple[int, int]] = []
    op_parts: list[tuple[np.ndarray, np.ndarray]] = []  # (events, overlap) per CPU-op lane
    annotations: list[tuple[int, int]] = []
    for ln in trace.lanes:
        if (ln.pid, ln.tid) != (thread.pid, thread.tid):
            continue
        # All rows at once: ranges clamped to the trace's limit nest thousands deep (issue 22).
        idx = trace.lane_window(ln.id, g.start_ns, g.end_ns)
        if idx.size == 0:
            continue
        ov = np.minimum(trace.end_ns[idx], g.end_ns) - np.maximum(trace.start_ns[idx], g.start_ns)
        if ln.kind == LaneKind.CUDA_API:
            keep = (cls[idx] >= Call.COPY) | (cls[idx] == Call.ALLOC)
            calls += [(int(o), int(i)) for i, o in zip(idx[keep], ov[keep], strict=True)]
        elif ln.kind == LaneKind.CPU_OPS:
            op_parts.append((idx, ov))
        elif ln.kind == LaneKind.ANNOTATIONS:
            full = idx[(trace.start_ns[idx] <= g.start_ns) | (ov >= g.dur_ns // 2)]
            if full.size:
                j = int(full[np.lexsort((full, trace.depth[full]))[-1]])
                annotations.append((int(trace.depth[j]), j))
    deepest = deepest_op(_op_candidates(trace, op_parts), g.dur_ns)
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


def _op_candidates(trace: Trace, parts: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[int, int, int]]:
    """The (depth, overlap, event) that ``deepest_op`` can answer with, found with numpy: the op overlapping
    most and, per lane, the deepest of those overlapping at least half as much; the same answer as
    every op would give, at the cost of a few, however deep the nesting."""
    if not parts:
        return []
    most = max(int(ov.max()) for _, ov in parts)
    out = []
    for idx, ov in parts:
        depth = trace.depth[idx]
        top = int(np.argmax(ov))
        out.append((int(depth[top]), int(ov[top]), int(idx[top])))
        near = np.flatnonzero(2 * ov >= most)
        if near.size:
            j = int(near[np.lexsort((idx[near], ov[near], depth[near]))[-1]])
            out.append((int(depth[j]), int(ov[j]), int(idx[j])))
    return out


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


def _other_stream_op(trace: Trace, nxt: int, g: Gap) -> int:
    """The op on another stream of the device that ended last inside the gap (what the op may have waited on)."""
    dev = trace.lanes[int(trace.lane[nxt])].device
    best, best_end = -1, g.start_ns
    for ln in trace.gpu_lanes(dev):
        if ln.id == int(trace.lane[nxt]):
            continue
        sl = trace.lane_events(ln.id)
        ends = trace.end_ns[sl]
        k = int(np.searchsorted(trace.start_ns[sl], g.end_ns, "left")) - 1
        if k >= 0 and g.start_ns < int(ends[k]) <= g.end_ns and int(ends[k]) > best_end:
            best, best_end = sl.start + k, int(ends[k])
    return best


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
