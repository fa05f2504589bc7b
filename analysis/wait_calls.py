"""The stream waits behind a dependency: the recorded waits, the host's wait calls, graph edges.

A blank region whose next op was queued before it began is a ``dependency`` (``analysis.causes``);
these say what it waited on, for the region's message and for the evidence.
"""

from __future__ import annotations

import numpy as np

from gaplens.analysis.busy import gpu_work
from gaplens.analysis.calls import used_codes
from gaplens.analysis.memo import per_trace
from gaplens.analysis.waits import event_wait_rows
from gaplens.loaders.model import Kind, Trace
from gaplens.loaders.syncs import parse_wait


@per_trace
def recorded_waits(trace: Trace) -> dict[int, tuple[int, int]]:
    """GPU op -> (the stream-wait row it waited on, the awaited op), from the recorded waits."""
    dst, src, row = event_wait_rows(trace, gpu_work(trace))
    return {int(d): (int(r), int(s)) for d, s, r in zip(dst.tolist(), src.tolist(), row.tolist(), strict=True)}


@per_trace
def _wait_calls(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The stream-wait API calls (cudaStreamWaitEvent, hipStreamWaitEvent, cuStreamWaitEvent) by lane, then start."""
    api = np.flatnonzero(trace.kind == int(Kind.CUDA_API))
    ids = trace.name_id[api]
    # A table over the names the calls use (not ``np.unique(return_inverse=True)``: a sort of every call).
    is_wait = np.zeros(len(trace.names), bool)
    used = used_codes(ids, len(trace.names))
    is_wait[used] = ["streamwaitevent" in trace.names[i].lower() for i in used.tolist()]
    calls = api[is_wait[ids]]
    order = np.lexsort((trace.start_ns[calls], trace.lane[calls]))
    return calls[order], trace.lane[calls[order]].astype(np.int64)


def record_call(trace: Trace, row: int) -> int:
    """The event-record call a recorded stream wait names (its correlation id), in the wait's process; -1 if absent."""
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


def graph_launched(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """Per op: True when its launch call is a CUDA/HIP graph launch (the gap is a graph edge)."""
    a = np.where(ops >= 0, trace.launch[np.maximum(ops, 0)], -1)
    ok = a >= 0
    out = np.zeros(ops.size, bool)
    if ok.any():
        ids = trace.name_id[a[ok]]
        graph = np.zeros(len(trace.names), bool)
        used = used_codes(ids, len(trace.names))
        graph[used] = ["graphlaunch" in trace.names[i].lower() for i in used.tolist()]
        out[ok] = graph[ids]
    return out
