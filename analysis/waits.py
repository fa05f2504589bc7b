"""Cross-stream event waits: which GPU op waited on which, from the recorded stream-wait rows.

    host      [record E on s20]          [wait(s24, E)]     [launch x on s24]
    stream 20  ██ a ██████████████ b ██████                       (b launched after the record)
    stream 24                                  ░░░░░░░░░░░░░░░░░░░ ██ x ██
                                                                   ╰ x: the first op launched on
    edge: a ──wait──▶ x                                              the waiting stream after the wait

The awaited op is the last op launched on the recorded stream before the event-record
call (``b`` above ran after the record, so it is not awaited); without the record's
correlation id, the last one launched there before the wait call. The details format is
``loaders.syncs``; when the waiting stream is not recorded (older files, hand-built rows),
the waiting op is approximated as the first op the same thread launches afterwards on
another stream.
"""

from __future__ import annotations

import numpy as np

from gaplens.loaders.model import Kind, LaneKind, Trace
from gaplens.loaders.syncs import parse_wait


def event_waits(trace: Trace, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(waiting op, awaited op) index pairs for the recorded stream waits; ``ops`` is the GPU work."""
    dst, src, _ = event_wait_rows(trace, ops)
    return dst, src


def latest_event_waits(trace: Trace, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``event_waits`` with one pair per waiting op: an op that waited on several events waited
    on the one whose op ended last (the critical path and the what-if replay read it so)."""
    dst, src = event_waits(trace, ops)
    if dst.size == 0:
        return dst, src
    last = np.lexsort((trace.end_ns[src], dst))
    dst, src = dst[last], src[last]
    keep = np.ones(dst.size, dtype=bool)
    keep[:-1] = dst[1:] != dst[:-1]
    return dst[keep], src[keep]


def event_wait_rows(trace: Trace, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(waiting op, awaited op, the stream-wait row) for the recorded stream waits: a gap's evidence."""
    none = (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64))
    sync = np.flatnonzero((trace.kind == int(Kind.SYNC)) & (trace.launch >= 0))
    if sync.size == 0:
        return none
    name_ids, name_inv = np.unique(trace.name_id[sync], return_inverse=True)
    is_wait = np.asarray(["wait" in trace.names[int(i)].lower() for i in name_ids.tolist()], dtype=bool)
    sync = sync[is_wait[name_inv.reshape(-1)]]
    launched = ops[trace.launch[ops] >= 0]
    if sync.size == 0 or launched.size == 0:
        return none
    # What each distinct detail says (there are few distinct ones).
    d_ids, d_inv = np.unique(trace.detail_id[sync], return_inverse=True)
    said = np.asarray([parse_wait(trace.details[int(d)]) for d in d_ids.tolist()], np.int64).reshape(-1, 3)
    stream, on_stream, record = (said[d_inv.reshape(-1), j] for j in range(3))
    call = trace.launch[sync]
    t_wait = trace.start_ns[call]
    device = np.asarray([ln.device for ln in trace.lanes], np.int64)[trace.lane[sync]]
    wait_lane = _stream_lanes(trace, device, stream)
    on_lane = _stream_lanes(trace, device, on_stream)

    by_launch = _ByLaunch(trace, launched)
    exact = (wait_lane >= 0) & (on_lane >= 0) & (wait_lane != on_lane)
    t_record = np.where(record >= 0, _record_starts(trace, call, record), -1)
    t_awaited = np.where(t_record >= 0, t_record, t_wait)
    dst = np.where(exact, by_launch.first_at_or_after(wait_lane, t_wait), -1)
    src = np.where(exact, by_launch.last_before(on_lane, t_awaited), -1)
    # Fallback: the waiting stream is unknown (older files): the old approximation.
    rough = np.flatnonzero((stream < 0) & (on_stream >= 0))
    if rough.size:
        dst[rough], src[rough] = _approximate(trace, launched, call[rough], on_stream[rough])
    ok = (dst >= 0) & (src >= 0)
    return dst[ok], src[ok], sync[ok]


def _stream_lanes(trace: Trace, device: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Lane id of each (device, stream) pair, -1 where the trace has no such stream lane."""
    lane_of = {(ln.device, ln.stream): ln.id for ln in trace.lanes if ln.kind == LaneKind.STREAM}
    pairs = zip(device.tolist(), stream.tolist(), strict=True)
    return np.fromiter((lane_of.get(p, -1) for p in pairs), np.int64, device.size)


def _record_starts(trace: Trace, wait_call: np.ndarray, record: np.ndarray) -> np.ndarray:
    """Start of the event-record call with each correlation id, in the wait call's process (-1 if absent).

    Several calls can share an id (a runtime call wrapping a driver call): the earliest
    start is the outer call. Only calls whose id is asked for are visited.
    """
    pid_of_lane = np.asarray([ln.pid for ln in trace.lanes], np.int64)
    api = np.flatnonzero((trace.kind == int(Kind.CUDA_API)) & np.isin(trace.corr, record[record >= 0]))
    first: dict[tuple[int, int], int] = {}
    pids = pid_of_lane[trace.lane[api]].tolist()
    for pid, corr, t in zip(pids, trace.corr[api].tolist(), trace.start_ns[api].tolist(), strict=True):
        if t < first.get((pid, corr), t + 1):
            first[(pid, corr)] = t
    asked = zip(pid_of_lane[trace.lane[wait_call]].tolist(), record.tolist(), strict=True)
    return np.fromiter((first.get(key, -1) for key in asked), np.int64, record.size)


class _ByLaunch:
    """GPU ops ordered by when their launch call started, per lane: O(log n) per query."""

    def __init__(self, trace: Trace, launched: np.ndarray) -> None:
        t = trace.start_ns[trace.launch[launched]]
        lane = trace.lane[launched].astype(np.int64)
        order = np.lexsort((t, lane))
        self.ops, self.t, self.lane = launched[order], t[order], lane[order]
        self.lo = int(self.t.min())
        self.span = int(self.t.max()) - self.lo + 2  # keys of one lane never reach the next
        self.key = self.lane * self.span + (self.t - self.lo)

    def _query(self, lane: np.ndarray, t: np.ndarray) -> np.ndarray:
        rel = np.clip(np.asarray(t, np.int64) - self.lo, 0, self.span - 1)
        return np.searchsorted(self.key, np.asarray(lane, np.int64) * self.span + rel, "left")

    def first_at_or_after(self, lane: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The first op on ``lane`` whose launch call started at or after ``t`` (-1 if none)."""
        k = self._query(lane, t)
        kk = np.minimum(k, self.ops.size - 1)
        ok = (k < self.ops.size) & (self.lane[kk] == lane) & (lane >= 0)
        return np.where(ok, self.ops[kk], -1)

    def last_before(self, lane: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The last op on ``lane`` whose launch call started before ``t`` (-1 if none)."""
        k = self._query(lane, t) - 1
        kk = np.maximum(k, 0)
        ok = (k >= 0) & (self.lane[kk] == lane) & (lane >= 0)
        return np.where(ok, self.ops[kk], -1)


def _approximate(
    trace: Trace, launched: np.ndarray, calls: np.ndarray, on_streams: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Without the waiting stream: the waiting op is the first op the wait call's thread
    launches afterwards on another stream; the awaited op the last launched before the
    wait on the named stream (any device). One O(n) scan per wait, so only for the few
    rows that lack the waiting stream."""
    dst = np.full(calls.size, -1, np.int64)
    src = np.full(calls.size, -1, np.int64)
    call_start = trace.start_ns[trace.launch[launched]]
    order = np.argsort(call_start, kind="stable")
    ops, call_start = launched[order], call_start[order]
    stream_of_lane = np.asarray([ln.stream for ln in trace.lanes], dtype=np.int64)
    op_stream = stream_of_lane[trace.lane[ops]]
    call_lane = trace.lane[trace.launch[ops]]
    for j, (w, on) in enumerate(zip(calls.tolist(), on_streams.tolist(), strict=True)):
        k = int(np.searchsorted(call_start, int(trace.start_ns[w]), "left"))
        before = np.flatnonzero(op_stream[:k] == on)
        after = np.flatnonzero((op_stream[k:] != on) & (call_lane[k:] == trace.lane[w]))
        if before.size and after.size:
            dst[j], src[j] = int(ops[k + after[0]]), int(ops[before[-1]])
    return dst, src
