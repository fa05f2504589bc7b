"""The lane model: window queries, depth packing, launch links, name cleaning."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gaplens.loaders import rows as depth_rows
from gaplens.loaders.build import link_launches
from gaplens.loaders.events import EventColumns
from gaplens.loaders.model import GPU_WORK_KINDS, Kind, LaneKind, Meta, clean_name
from gaplens.loaders.rows import pack_depths


def _trace(intervals, lane_key=(LaneKind.CPU_OPS, 1, 1)):
    cols = EventColumns()
    for i, (s, e) in enumerate(intervals):
        cols.add(lane_key, s, e, f"ev{i}", Kind.CPU_OP)
    return cols.finish(Meta("test"), None)


intervals = st.lists(
    st.tuples(st.integers(0, 10_000), st.integers(0, 2_000)).map(lambda t: (t[0], t[0] + t[1])),
    min_size=0,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(intervals, st.integers(-100, 12_000), st.integers(0, 5_000))
def test_window_matches_brute_force(ivs, t0, width):
    trace = _trace(ivs)
    t1 = t0 + width
    origin = trace.meta.origin_ns
    got = set()
    for row in range(trace.row_lane.size):
        for i in trace.window(row, t0 - origin, t1 - origin):
            got.add((int(trace.start_ns[i]) + origin, int(trace.end_ns[i]) + origin, trace.name(i)))
    want = set()
    for i, (s, e) in enumerate(ivs):
        if (e > t0 and s < t1) or (s == e and t0 <= s < t1):
            want.add((s, e, f"ev{i}"))
    assert got == want


@settings(max_examples=200, deadline=None)
@given(intervals)
def test_rows_never_overlap_and_keep_every_event(ivs):
    trace = _trace(ivs)
    assert len(trace) == len(ivs)
    for row in range(trace.row_lane.size):
        sl = trace.row_slice(row)
        s, e = trace.start_ns[sl], trace.end_ns[sl]
        assert np.all(np.diff(s) >= 0)
        assert np.all(s[1:] >= e[:-1]), "two events share a sub-row and overlap"


def test_nested_slices_get_their_nesting_depth():
    lane = np.zeros(4, np.int32)
    start = np.array([0, 1, 2, 5])
    end = np.array([10, 9, 3, 6])
    assert pack_depths(lane, start, end).tolist() == [0, 1, 2, 2]


def test_partial_overlap_goes_one_level_deeper_instead_of_being_dropped():
    # A child that ends 1 ns after its parent (float rounding), then a sibling.
    lane = np.zeros(3, np.int32)
    start = np.array([0, 2, 11])
    end = np.array([10, 11, 13])
    depth = pack_depths(lane, start, end)
    assert depth.tolist()[:2] == [0, 1]
    # The sibling starts before the child ends: it must not share the child's row.
    assert depth[2] != depth[1] or start[2] >= end[1]


def test_launch_links_by_correlation_one_to_many():
    cols = EventColumns()
    cols.add((LaneKind.CUDA_API, 1, 1), 0, 10, "cudaGraphLaunch", Kind.CUDA_API, corr=7)
    for k in range(3):
        cols.add((LaneKind.STREAM, 0, 7), 20 + 10 * k, 25 + 10 * k, f"k{k}", Kind.KERNEL, corr=7)
    cols.add((LaneKind.STREAM, 0, 7), 100, 110, "orphan", Kind.KERNEL, corr=99)
    trace = cols.finish(Meta("test"), None)
    api = int(np.flatnonzero(trace.kind == Kind.CUDA_API)[0])
    kernels = trace.launched_by(api)
    assert sorted(trace.name(i) for i in kernels) == ["k0", "k1", "k2"]
    orphan = next(i for i in range(len(trace)) if trace.name(i) == "orphan")
    assert trace.launch[orphan] == -1


def test_correlation_ids_are_scoped():
    cols = EventColumns()
    cols.add((LaneKind.CUDA_API, 1, 1), 0, 10, "launchA", Kind.CUDA_API, corr=5)
    cols.add((LaneKind.CUDA_API, 2, 2), 0, 10, "launchB", Kind.CUDA_API, corr=5)
    cols.add((LaneKind.STREAM, 0, 7), 20, 30, "kB", Kind.KERNEL, corr=5)
    scope = np.array([1, 2, 2])  # event order as added
    trace = cols.finish(Meta("test"), scope)
    k = next(i for i in range(len(trace)) if trace.name(i) == "kB")
    assert trace.name(int(trace.launch[k])) == "launchB"


def test_clean_name_strips_terminal_controls():
    assert clean_name("ok\x1b[31mred\x1b[0m\x07\x9b") == "okred"
    assert clean_name("plain name<4>") == "plain name<4>"


def test_times_are_relative_to_origin():
    trace = _trace([(1_000_000_000_123, 1_000_000_000_200)])
    assert trace.meta.origin_ns == 1_000_000_000_123
    assert trace.start_ns.tolist() == [0] and trace.end_ns.tolist() == [77]


def test_phase_gpu_span_starts_before_its_first_kernel():
    """A phase starts where a CUDA event recorded at its start would fire (not after its first kernel) and
    ends where one recorded at its end would (DESIGN.md: M(start)..M(end)); this pinned the end of the
    range's last CUDA call (990) while phases were timed from their calls."""
    from gaplens.analysis.phases import phases

    cols = EventColumns()
    cols.add((LaneKind.ANNOTATIONS, 1, 1), 100, 1_000, "decode", Kind.ANNOTATION)
    cols.add((LaneKind.CUDA_API, 1, 1), 100, 110, "cudaLaunchKernel", Kind.CUDA_API, corr=1)
    cols.add((LaneKind.STREAM, 0, 7), 120, 500, "k", Kind.KERNEL, corr=1)
    cols.add((LaneKind.CUDA_API, 1, 1), 900, 990, "cudaStreamSynchronize", Kind.CUDA_API, corr=2)
    trace = cols.finish(Meta("test"), None)
    (p,) = phases(trace)
    origin = trace.meta.origin_ns
    assert p.start_ns + origin == 100
    assert p.end_ns + origin == 1_000  # the kernel ended at 500: an event at the range's end fires at once


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from([Kind.CUDA_API, Kind.KERNEL, Kind.MEMCPY_HTOD, Kind.SYNC, Kind.CPU_OP, Kind.GRAPH]),
            st.one_of(st.integers(-3, 40), st.integers(0, 2**62), st.just(2**40 + 5)),
            st.sampled_from([0, 7 << 24, 9 << 24, -(1 << 24)]),
        ),
        max_size=60,
    ),
    scoped=st.booleans(),
)
def test_launch_links_equal_a_brute_force_search(rows, scoped):
    """Dense ids (a lookup table) and sparse ones (a sort): each GPU op gets the earliest call of its pair."""
    kind = np.array([int(k) for k, _, _ in rows], np.int8)
    corr = np.array([c for _, c, _ in rows], np.int64)
    scope = np.array([s for _, _, s in rows], np.int64) if scoped else None
    want = np.full(len(rows), -1, np.int64)
    gpu = {int(k) for k in (*GPU_WORK_KINDS, Kind.SYNC)}
    for g, (k, c, s) in enumerate(rows):
        if int(k) in gpu and c >= 0:
            want[g] = next(
                (
                    i
                    for i, (ki, ci, si) in enumerate(rows)
                    if ki == Kind.CUDA_API and ci >= 0 and ci % 2**40 == c % 2**40 and (not scoped or si == s)
                ),
                -1,
            )
    assert link_launches(kind, corr, scope).tolist() == want.tolist()


def _stacked(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> list[int]:
    """Depth by a stack walk: for slices that nest perfectly, the one right answer."""
    out, stack, prev = [], [], None
    for ln, s, e in zip(lane.tolist(), start.tolist(), end.tolist(), strict=True):
        if ln != prev:
            stack, prev = [], ln
        while stack and stack[-1] <= s:
            stack.pop()
        out.append(len(stack))
        stack.append(e)
    return out


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 60), st.integers(0, 25)), min_size=1, max_size=80),
    st.booleans(),
    st.sampled_from([1, 3, 7, 1 << 18]),
)
def test_depths_separate_every_overlap_whatever_the_lane_groups(events, nested, group):
    """No two events share a (lane, depth) row and overlap; perfect nesting gets the stack's depth;
    packing lanes a few events at a time (``PACK_GROUP``) gives what one pass gives."""
    lane = np.array([e[0] for e in events], np.int32)
    start = np.array([e[1] for e in events], np.int64)
    end = start + np.array([e[2] for e in events], np.int64)
    if nested:  # children inside their parent: cut each end at the end of the slice open around it
        order = np.lexsort((start - end, start, lane))
        lane, start, end = lane[order], start[order], end[order]
        for i in range(1, len(events)):
            for j in range(i - 1, -1, -1):
                if lane[j] == lane[i] and start[i] < end[j]:
                    end[i] = max(start[i], min(end[i], end[j]))
                    break
    order = np.lexsort((start - end, start, lane))
    lane, start, end = lane[order], start[order], end[order]
    whole = pack_depths(lane, start, end)
    saved, depth_rows.PACK_GROUP = depth_rows.PACK_GROUP, group
    try:
        depth = pack_depths(lane, start, end)
    finally:
        depth_rows.PACK_GROUP = saved
    assert depth.tolist() == whole.tolist()
    for key in set(zip(lane.tolist(), depth.tolist(), strict=True)):
        row = np.flatnonzero((lane == key[0]) & (depth == key[1]))
        assert np.all(start[row][1:] >= end[row][:-1])
    if nested:
        assert depth.tolist() == _stacked(lane, start, end)


def _every_row_each_pass(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> list[int]:
    """The packing as it was: each pass reads every row and pushes each clashing slice one row deeper."""
    depth = depth_rows._nesting(lane, start, end)
    for _ in range(256):
        clash = depth_rows._clashes(lane, depth, start, end)
        if not clash.any():
            break
        depth += clash
    return depth.tolist()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 200), st.integers(1, 60)), min_size=1, max_size=120))
def test_packing_reads_only_the_rows_that_received_slices(events):
    """Straddling ranges (an NVTX range per layer laid over the step's own ranges) take many passes: reading only
    the rows that received slices gives the depths that passes over every row give."""
    lane = np.array([e[0] for e in events], np.int32)
    start = np.array([e[1] for e in events], np.int64)
    end = start + np.array([e[2] for e in events], np.int64)
    order = np.lexsort((start - end, start, lane))
    lane, start, end = lane[order], start[order], end[order]
    assert pack_depths(lane, start, end).tolist() == _every_row_each_pass(lane, start, end)
