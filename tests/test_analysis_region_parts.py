"""The parts of the blank-region reading that were rewritten for speed, against their definitions.

Each vectorised shortcut (a presence table instead of ``np.unique``, one binary search per short op,
the cached call waits) is checked against the plain definition it replaces, on random inputs.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gaplens.analysis import cause_messages, memo
from gaplens.analysis.calls import Call, api_class, used_codes
from gaplens.analysis.critical_path import _path, critical_path
from gaplens.analysis.gaps import gap_columns
from gaplens.analysis.regions import _regions, regions
from gaplens.analysis.spans import BusySpans
from gaplens.analysis.thread_time import DISPATCH_MAX_NS, _covered, _dispatching_ops, call_waits, waited_ns
from gaplens.loaders import load
from tests.handbuilt import Builder


@given(st.lists(st.integers(0, 40), max_size=200))
def test_used_codes_are_the_distinct_codes_sorted(codes):
    got = used_codes(np.asarray(codes, np.int32), 41)
    assert got.tolist() == sorted(set(codes))


CLASSES = [int(c) for c in Call]
calls_st = st.lists(st.tuples(st.integers(0, 1_000), st.sampled_from(CLASSES)), max_size=40)
ops_st = st.lists(st.tuples(st.integers(0, 1_000), st.integers(0, 2 * DISPATCH_MAX_NS)), max_size=40)


@settings(max_examples=300)
@given(calls_st, ops_st)
def test_dispatching_ops_is_a_short_op_with_a_queueing_call_starting_inside(calls, ops):
    """Brute force: an op is dispatch overhead when it lasts at most DISPATCH_MAX_NS and a call that queues
    work (``>= Call.LAUNCH``) starts inside [start, end]; calls in any order."""
    a_s = np.asarray([c[0] for c in calls], np.int64)
    a_c = np.asarray([c[1] for c in calls], np.int8)
    o_s = np.asarray([o[0] for o in ops], np.int64)
    o_e = o_s + np.asarray([o[1] for o in ops], np.int64)
    want = [
        (e - s) <= DISPATCH_MAX_NS and any(c >= Call.LAUNCH and s <= t <= e for t, c in calls)
        for s, e in zip(o_s.tolist(), o_e.tolist(), strict=True)
    ]
    assert _dispatching_ops(a_s, a_c, o_s, o_e).tolist() == want


def test_call_waits_are_the_waits_of_every_sync_call():
    """The cached waits equal ``waited_ns`` over the trace's call classes: the sync at 200 waited until k1 ended.

    thread  [launch k1]   [cudaDeviceSynchronize 200 ....... 900]
    stream7        ███████████████ k1 (20..800) ███████
    """
    b = Builder()
    b.launch(0, 10, 20, 800, name="k1")
    b.call(200, 900, "cudaDeviceSynchronize")
    t = b.trace()
    got = call_waits(t)
    assert np.array_equal(got, waited_ns(t, api_class(t)))
    sync = int(np.flatnonzero(api_class(t) == Call.SYNC)[0])
    assert got[sync] == 800 - 200


intervals_st = st.lists(st.tuples(st.integers(-50, 1_000), st.integers(0, 200)), max_size=30)


@settings(max_examples=300)
@given(intervals_st, intervals_st)
def test_covered_is_busy_before_at_the_end_less_at_the_start(spans, queries):
    """``_covered`` (one search per bound over sentinel-led spans) equals B(e) - B(s), empty spans included."""
    busy = BusySpans(np.asarray([a for a, _ in spans], np.int64), np.asarray([a + w for a, w in spans], np.int64))
    s = np.asarray([a for a, _ in queries], np.int64)
    e = s + np.asarray([w for _, w in queries], np.int64)
    assert _covered(busy, s, e).tolist() == (busy.busy_before(e) - busy.busy_before(s)).tolist()


def test_the_default_regions_are_kept_and_equal_a_fresh_reading():
    """``regions(trace)`` is read by the gaps, the idle time and the summary: computed once, the same columns.

    stream7  ███k1███        ███k2███      ███k3███
                     ^gap 1^         ^gap 2^
    """
    b = Builder()
    b.launch(0, 10, 20, 100, name="k1")
    b.launch(30, 40, 300, 400, name="k2")
    b.launch(50, 60, 700, 800, name="k3")
    t = b.trace()
    first = regions(t)
    assert regions(t) is first
    fresh = _regions(t, None, None, 1)
    assert list(zip(first.start_ns.tolist(), first.end_ns.tolist(), strict=True)) == [(100, 300), (400, 700)]
    for col in ("device", "start_ns", "end_ns", "idle"):
        assert np.array_equal(getattr(first, col), getattr(fresh, col))
    assert regions(t, min_ns=250).start_ns.tolist() == [400]


ALLOC_FAULT = Path(__file__).resolve().parent / "data" / "round4" / "alloc_fault.json.gz"  # 1.6k regions, 1k name calls


def _fresh_columns(monkeypatch, block: int):
    monkeypatch.setattr(cause_messages, "MESSAGE_BLOCK", block)
    memo.clear()
    trace = load(str(ALLOC_FAULT), use_cache=False)
    return trace, gap_columns(trace)


def test_messages_are_written_when_read_a_block_at_a_time(monkeypatch):
    """Nothing is written by the reading itself; one read writes one block; blocks read in any order
    give the messages the whole pass gives, region by region."""
    written: list[int] = []
    real = cause_messages.messages

    def spy(trace, reg, *rest):
        written.append(len(reg))
        return real(trace, reg, *rest)

    monkeypatch.setattr(cause_messages, "messages", spy)
    trace, cols = _fresh_columns(monkeypatch, 100)
    n = len(cols)
    assert n > 1_000 and written == []
    k = n - 1
    assert isinstance(cols.message[k], str) and written == [n - (n - 1) // 100 * 100]
    order = np.random.default_rng(0).permutation(n).tolist()
    by_one = [""] * n
    for i in order:
        by_one[i] = cols.message[i]
    whole = list(cause_messages.GapMessages(trace, *_inputs(cols)))
    assert by_one == whole
    assert sum(1 for m in whole if "the launching thread" in m) > 500  # the per-region sentences are there


def _inputs(cols):
    """A fresh GapMessages' inputs, from the one the columns hold."""
    m = cols.message
    return m._reg, m._nxt, m._cause, m._names, m._known, m._warm


def test_messages_outlive_their_trace_and_keep_it_from_no_one(monkeypatch):
    """Columns held after the trace is dropped still read every message (from a shallow copy), the trace
    itself is collected, and the memo forgets its readings."""
    trace, cols = _fresh_columns(monkeypatch, 100)
    want = list(cause_messages.GapMessages(trace, *_inputs(cols)))
    cols = gap_columns(trace)
    assert cols.message._written.sum() == 0
    gone = weakref.ref(trace)
    del trace
    gc.collect()
    assert gone() is None
    assert list(cols.message) == want
    assert not any(ref() is None for m in memo._MEMOS for ref, _ in m.values())


def test_the_whole_critical_path_is_walked_once_and_equals_a_fresh_walk():
    """The default path (blank regions, smells, export) is kept; a window's path is walked each time.

    thread  [launch k1]  python  [launch k2]
    stream7       ███k1███           ███k2███
    """
    b = Builder()
    b.launch(0, 10, 20, 100, name="k1")
    b.cpu(10, 290, "python_work")
    b.launch(290, 300, 310, 400, name="k2")
    t = b.trace()
    whole = critical_path(t)
    assert critical_path(t) is whole
    fresh = _path(t, None)
    for col in ("nodes", "seg_start_ns", "seg_end_ns", "seg_kind", "seg_event"):
        assert np.array_equal(getattr(whole, col), getattr(fresh, col))
    assert whole.time_in(np.asarray([100]), np.asarray([310])).tolist() == [210]  # host and launch: the gap
    assert critical_path(t, (0, 400)) is not critical_path(t, (0, 400))
