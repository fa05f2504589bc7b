"""Cross-stream event waits: the recorded waiting stream and event record place the wait edge exactly."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from gaplens.analysis.busy import gpu_work
from gaplens.analysis.critical_path import Edge, graph
from gaplens.analysis.waits import event_waits
from gaplens.loaders.kineto.context import Context
from gaplens.loaders.kineto.slow import from_lines
from gaplens.loaders.model import Kind, Trace
from gaplens.loaders.syncs import SyncWait, parse_wait, sync_detail
from tests.conftest import PUBLIC, _cached, loaded, public
from tests.handbuilt import Builder

MULTI_STREAM = PUBLIC / "hta" / "event_sync_multi_stream.json.gz"


def _op(trace: Trace, name: str) -> int:
    return int(np.flatnonzero(np.asarray([trace.name(i) == name for i in range(len(trace))]))[0])


def _pairs(trace: Trace) -> list[tuple[int, int]]:
    dst, src = event_waits(trace, gpu_work(trace))
    return list(zip(dst.tolist(), src.tolist(), strict=True))


def _sync_details(trace: Trace) -> list[str]:
    return [trace.details[int(trace.detail_id[i])] for i in np.flatnonzero(trace.kind == int(Kind.SYNC))]


def test_detail_format_round_trips():
    text = sync_detail("Stream Wait Event", 24, 20, 1385)
    assert text == "Stream Wait Event  stream 24 waits on stream 20  record corr 1385"
    assert parse_wait(text) == SyncWait(24, 20, 1385)
    assert sync_detail("Event Sync", -1, 20, -1) == "Event Sync  waits on stream 20"
    assert sync_detail("Stream Sync", 7, -1, -1) == "Stream Sync  stream 7"
    assert sync_detail("Context Sync", -1, -1, -1) == "Context Sync"
    # The format written before the waiting stream was recorded still reads.
    assert parse_wait("Stream Wait Event  waits on stream 7") == SyncWait(-1, 7, -1)
    assert parse_wait("Stream sync  stream 7  by cudaStreamSynchronize") == SyncWait(-1, -1, -1)


def test_waiting_stream_beats_the_next_launch_of_the_thread():
    """After the wait the thread first launches on an unrelated stream 9: the wait is stream 13's."""
    b = Builder()
    b.launch(0, 10, 12, 300, s=7, name="k1")
    b.call(20, 25, "cudaEventRecord")
    b.wait_event(30, 35, on_stream=7, stream=13)
    b.launch(40, 45, 50, 60, s=9, name="other")
    b.launch(50, 55, 300, 400, s=13, name="k2")
    tr = b.trace()
    k1, k2, other = _op(tr, "k1"), _op(tr, "k2"), _op(tr, "other")
    assert _pairs(tr) == [(k2, k1)]
    g = graph(tr)
    assert g.binding[k2] == Edge.WAIT and g.pred[k2] == k1
    assert g.binding[other] != Edge.WAIT


def test_approximation_without_the_waiting_stream_picks_the_next_launch():
    """The same trace without the waiting stream: the fallback takes the thread's next launch elsewhere."""
    b = Builder()
    b.launch(0, 10, 12, 300, s=7, name="k1")
    b.wait_event(30, 35, on_stream=7)
    b.launch(40, 45, 50, 60, s=9, name="other")
    b.launch(50, 55, 300, 400, s=13, name="k2")
    tr = b.trace()
    assert _pairs(tr) == [(_op(tr, "other"), _op(tr, "k1"))]


def test_awaited_op_is_the_last_before_the_event_record():
    """k_late is queued on stream 7 after the record but before the wait: stream 13 does not wait for it."""
    b = Builder()
    b.launch(0, 10, 12, 300, s=7, name="k1")
    record = b.call(20, 25, "cudaEventRecord")
    b.launch(26, 29, 300, 500, s=7, name="k_late")
    b.wait_event(30, 35, on_stream=7, stream=13, record_corr=record)
    b.launch(40, 50, 300, 400, s=13, name="k2")
    tr = b.trace()
    k1, k2 = _op(tr, "k1"), _op(tr, "k2")
    assert _pairs(tr) == [(k2, k1)]
    g = graph(tr)
    assert g.binding[k2] == Edge.WAIT and g.pred[k2] == k1


def test_without_the_record_call_the_wait_call_bounds_the_awaited_op():
    b = Builder()
    b.launch(0, 10, 12, 300, s=7, name="k1")
    b.launch(26, 29, 300, 500, s=7, name="k_late")
    b.wait_event(30, 35, on_stream=7, stream=13, record_corr=999)  # record outside the capture
    b.launch(40, 50, 500, 600, s=13, name="k2")
    tr = b.trace()
    assert _pairs(tr) == [(_op(tr, "k2"), _op(tr, "k_late"))]


def test_a_stream_waiting_on_itself_adds_no_edge():
    b = Builder()
    b.launch(0, 10, 12, 300, s=7, name="k1")
    b.wait_event(30, 35, on_stream=7, stream=7)
    b.launch(40, 50, 300, 400, s=7, name="k2")
    assert _pairs(b.trace()) == []


def test_an_op_waiting_on_two_events_waits_on_the_later_one():
    b = Builder()
    b.launch(0, 5, 10, 200, s=7, name="a")
    b.launch(6, 9, 10, 350, s=9, name="c")
    b.wait_event(20, 22, on_stream=7, stream=13)
    b.wait_event(23, 25, on_stream=9, stream=13)
    b.launch(30, 40, 350, 400, s=13, name="k")
    tr = b.trace()
    g = graph(tr)
    k = _op(tr, "k")
    assert sorted(_pairs(tr)) == sorted([(k, _op(tr, "a")), (k, _op(tr, "c"))])
    assert g.binding[k] == Edge.WAIT and g.pred[k] == _op(tr, "c")


@pytest.fixture(scope="module")
def multi_stream() -> Trace:
    return _cached(str(public("hta/event_sync_multi_stream.json.gz")))


def test_kineto_sync_rows_record_the_waiting_stream(multi_stream):
    details = _sync_details(multi_stream)
    assert "Stream Wait Event  stream 24 waits on stream 20  record corr 1385" in details
    assert "Event Sync  waits on stream 20  record corr 32" in details
    assert "Context Sync" in details
    assert not any("-1" in d for d in details)  # Kineto's "none" sentinels are left out


def test_kineto_fallback_path_writes_the_same_details(multi_stream):
    with gzip.open(MULTI_STREAM, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    ctx = Context()
    block = from_lines(ctx, b"\n".join(json.dumps(e).encode() for e in events))
    text = {v: k for k, v in ctx.details.items()}
    slow = sorted(text[int(d)] for d, k in zip(block.detail_id, block.kind, strict=True) if k == int(Kind.SYNC))
    assert slow == sorted(_sync_details(multi_stream))


def test_kineto_wait_edge_lands_on_the_recorded_ops(multi_stream):
    """cudaStreamWaitEvent (corr 1389): stream 24 waits on the event recorded on stream 20 by corr 1385.

    The awaited op is the sgemm (corr 27), the last op queued on stream 20 before that record;
    the waiting op is the memset (corr 1411), the first op queued on stream 24 afterwards.
    """
    tr = multi_stream
    pairs = _pairs(tr)
    assert len(pairs) == 1
    dst, src = pairs[0]
    assert (int(tr.corr[dst]), tr.lanes[int(tr.lane[dst])].stream, tr.name(dst)) == (1411, 24, "Memset (Device)")
    assert (int(tr.corr[src]), tr.lanes[int(tr.lane[src])].stream) == (27, 20)
    assert tr.name(src).startswith("ampere_sgemm")


def test_nsys_waits_join_the_event_record():
    """nsys_train_step: the compute stream 7 waits four times on the copy stream 13 (``wait_stream``)."""
    tr = loaded("nsys_train_step.sqlite.gz")
    waits = [d for d in _sync_details(tr) if d.startswith("Stream wait event")]
    said = [parse_wait(d) for d in waits]
    assert len(said) == 4
    assert all(s.stream == 7 and s.on_stream == 13 and s.record_corr >= 0 for s in said)
    pairs = _pairs(tr)
    assert len(pairs) == 4
    records = {s.record_corr for s in said}
    api = np.flatnonzero(tr.kind == int(Kind.CUDA_API))
    record_start = {int(tr.corr[i]): int(tr.start_ns[i]) for i in api if int(tr.corr[i]) in records}
    assert len(record_start) == 4
    ops = gpu_work(tr)
    on13 = ops[np.asarray([tr.lanes[int(tr.lane[i])].stream == 13 for i in ops]) & (tr.launch[ops] >= 0)]
    launched_at = tr.start_ns[tr.launch[on13]]
    for (dst, src), s in zip(sorted(pairs), sorted(said, key=lambda s: s.record_corr), strict=True):
        assert tr.lanes[int(tr.lane[dst])].stream == 7
        assert tr.lanes[int(tr.lane[src])].stream == 13
        # The awaited copy is the last one queued on stream 13 before the record call.
        t = record_start[s.record_corr]
        assert int(src) == int(on13[launched_at < t][np.argmax(launched_at[launched_at < t])])
