"""The vectorised phase lookups (``innermost_each``, ``holding_share_each``) answer exactly what the
one-interval rules answer (written out here, one phase at a time), ties and instants included: the
smells ask them for every finding at once, and ``innermost`` is the same rule for one interval."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gaplens.analysis import phases as ph
from gaplens.analysis.phases import Phase, holding_share_each, innermost, innermost_each

T = st.integers(0, 60)


@st.composite
def phase_lists(draw) -> list[Phase]:
    out = []
    for k in range(draw(st.integers(0, 8))):
        a, b = sorted((draw(T), draw(T)))
        ha, hb = sorted((draw(T), draw(T)))
        out.append(Phase(f"p{k}", ha, hb, a, b, draw(st.integers(0, 3)), k))
    return out


@st.composite
def intervals(draw) -> tuple[np.ndarray, np.ndarray]:
    pairs = [sorted((draw(T), draw(T))) for _ in range(draw(st.integers(0, 12)))]
    return np.asarray([p[0] for p in pairs], np.int64), np.asarray([p[1] for p in pairs], np.int64)


def _innermost_by_loop(found: list[Phase], t0: int, t1: int) -> Phase | None:
    """The rule as it was written before it was vectorised: one phase at a time, lexicographic key."""
    best, best_key = None, None
    for p in found:
        overlap = max(min(p.end_ns, t1) - max(p.start_ns, t0), min(p.host_end_ns, t1) - max(p.host_start_ns, t0))
        holds = p.start_ns <= t0 < p.end_ns or p.host_start_ns <= t0 < p.host_end_ns
        if overlap <= 0 and not holds:
            continue
        key = (2 * overlap >= (t1 - t0) or (t1 == t0 and holds), p.depth, overlap)
        if best_key is None or key > best_key:
            best, best_key = p, key
    return best


def _holds_share(found: list[Phase], t0: int, t1: int, share: float) -> bool:
    need = share * (t1 - t0)
    return any(
        min(b, t1) - max(a, t0) >= need
        for p in found
        for a, b in ((p.start_ns, p.end_ns), (p.host_start_ns, p.host_end_ns))
    )


@settings(max_examples=400, deadline=None)
@given(phase_lists(), intervals())
def test_innermost_each_is_the_one_phase_at_a_time_rule_for_every_interval(found, iv):
    t0, t1 = iv
    got = innermost_each(found, t0, t1)
    for k, (a, b) in enumerate(zip(t0.tolist(), t1.tolist(), strict=True)):
        want = _innermost_by_loop(found, a, b)
        assert (found[got[k]] if got[k] >= 0 else None) is want, (a, b)
        assert innermost(found, a, b) is want


@settings(max_examples=400, deadline=None)
@given(phase_lists(), intervals(), st.sampled_from([0.5, 0.25, 1.0]))
def test_holding_share_each_is_the_scalar_rule(found, iv, share):
    t0, t1 = iv
    got = holding_share_each(found, t0, t1, share)
    assert got.tolist() == [_holds_share(found, a, b, share) for a, b in zip(t0.tolist(), t1.tolist(), strict=True)]


def test_blocks_cover_every_query_when_the_matrix_is_split(monkeypatch):
    """Many queries against many phases are answered in blocks; none is skipped or answered twice."""
    monkeypatch.setattr(ph, "_LOOKUP_BLOCK", 7)
    found = [Phase(f"p{k}", 10 * k, 10 * k + 10, 10 * k, 10 * k + 10, 0, k) for k in range(5)]
    t0 = np.arange(0, 50, 3, dtype=np.int64)
    got = innermost_each(found, t0, t0 + 1)
    assert got.tolist() == [int(t) // 10 for t in t0.tolist()]
    assert holding_share_each(found, t0, t0 + 1, 0.5).all()


@pytest.mark.parametrize(
    ("block", "cells", "long_share"),
    [(1, 1 << 16, 0.01), (3, 1 << 16, 0.0), (64, 1 << 16, 0.01), (64, 50, 0.01), (64, 1, 0.5), (7, 200, 1.0)],
)
def test_queries_are_asked_against_the_phases_near_them_in_blocks(monkeypatch, block, cells, long_share):
    """Queries sorted in time, asked a block at a time against only the phases near the block (issue 31: 700
    findings x 92k nested phases), or one at a time against the phases near each when a block would compare too
    many cells; the phases near found by binary search, the longest apart: the answers are the one-interval
    rules', far phases and reversed intervals included."""
    monkeypatch.setattr(ph, "_NEAR_BLOCK", block)
    monkeypatch.setattr(ph, "_NEAR_CELLS", cells)
    monkeypatch.setattr(ph, "_LONG_SHARE", long_share)
    rng = np.random.default_rng(31)
    found = []
    for k in range(120):
        ha = int(rng.integers(0, 5_000))
        hb = ha + int(rng.integers(0, 400))
        a = ha + int(rng.integers(-50, 100))
        found.append(Phase(f"p{k}", ha, hb, a, max(a, hb + int(rng.integers(-100, 300))), int(rng.integers(0, 4)), k))
    found.append(Phase("whole", 0, 6_000, 0, 6_000, 0, 120))  # one long phase near every query
    t0 = rng.integers(-200, 6_200, 300)
    t1 = t0 + rng.integers(-50, 500, 300)
    t1[::7] = t0[::7]  # instants
    got = innermost_each(found, t0, t1)
    for k, (a, b) in enumerate(zip(t0.tolist(), t1.tolist(), strict=True)):
        want = _innermost_by_loop(found, a, b)
        assert (found[got[k]] if got[k] >= 0 else None) is want, (a, b)
    for share in (0.5, 1.0, 0.0):
        held = holding_share_each(found, t0, t1, share).tolist()
        assert held == [_holds_share(found, a, b, share) for a, b in zip(t0.tolist(), t1.tolist(), strict=True)]


def test_the_span_index_finds_exactly_the_phases_near_an_interval():
    """``_SpanIndex.near`` against the full scan, on a PhaseList (its index kept) and on a plain list."""
    rng = np.random.default_rng(7)
    n = 400
    hs = rng.integers(0, 10_000, n)
    he = hs + rng.integers(0, 50, n)
    he[::37] += 5_000  # a few long ranges
    s = hs + rng.integers(-20, 20, n)
    e = np.maximum(s, he + rng.integers(-20, 200, n))
    ints = np.stack(
        [hs, he, s, e, np.zeros(n, np.int64), np.arange(n), np.zeros(n, np.int64), np.zeros(n, np.int64)], 1
    )
    plist = ph.PhaseList()
    plist._fill([f"p{k}" for k in range(n)], ints.astype(np.int64), np.zeros(n, np.int64))
    for found in (plist, list(plist)):
        index = ph._span_index(found)
        for lo in range(-100, 15_100, 97):
            hi = lo + int(rng.integers(0, 300))
            want = np.flatnonzero(((s <= hi) & (e >= lo)) | ((hs <= hi) & (he >= lo)))
            assert index.near(lo, hi).tolist() == want.tolist()
    assert ph._span_index(plist) is ph._span_index(plist)  # kept on the PhaseList


# ---- the marker clock, many ranges at once (issue 31: 100k NVTX ranges took seconds one by one) -----


def _stream_for_one(clock: ph.MarkerClock, pid: int, t0: int, t1: int) -> tuple[int, int]:
    """The one-range rule as it was written: the group with the most ops queued in [t0, t1) (first wins),
    else the process's busiest group (first wins)."""
    best, best_count, busiest, busiest_ns = -1, 0, -1, -1.0
    for k, h in enumerate(clock._heads.tolist()):
        if clock._pid[h] != pid:
            continue
        seg = clock._queued[int(clock._group_bounds[k]) : int(clock._group_bounds[k + 1])]
        count = int(np.searchsorted(seg, t1, "left") - np.searchsorted(seg, t0, "left"))
        if count > best_count:
            best, best_count = int(clock._lane[h]), count
        if clock._group_busy[k] > busiest_ns:
            busiest, busiest_ns = int(clock._lane[h]), float(clock._group_busy[k])
    return (best, best_count) if best_count else (busiest, 0)


def _at_one(clock: ph.MarkerClock, lane: int, t: int) -> int:
    hit = np.flatnonzero(clock.lanes == lane)
    if hit.size == 0:
        return t
    lo, hi = int(clock.bounds[hit[0]]), int(clock.bounds[hit[0] + 1])
    k = lo + int(np.searchsorted(clock.queued[lo:hi], t, "left"))
    return max(t, int(clock.reach[k - 1])) if k > lo else t


def test_phases_timed_at_once_equal_one_at_a_time():
    import pytest

    from gaplens.loaders import load
    from tests.conftest import sample

    for name in ("smells.json.gz", "decode_eager.json.gz", "nsys_smells.sqlite.gz"):
        try:
            trace = load(sample(name))
        except Exception as exc:  # pragma: no cover - a sample not beside the checkout
            pytest.skip(str(exc))
        found = ph.phases(trace)
        assert found
        clock = ph.marker_clock(trace)
        for p in found:
            lane, n_ops = _stream_for_one(clock, p.pid, p.host_start_ns, p.host_end_ns)
            assert clock.stream_for(p.pid, p.host_start_ns, p.host_end_ns) == (lane, n_ops)  # the one-range form
            device = trace.lanes[lane].device if n_ops and lane >= 0 else None
            want = (_at_one(clock, lane, p.host_start_ns), _at_one(clock, lane, p.host_end_ns), lane, device)
            assert (p.start_ns, p.end_ns, p.lane, p.device) == want, (name, p)
