"""Pure raster and viewport tests: golden strings, coverage against brute force, no Textual."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gaplens.tui.raster import (
    GAP_GLYPH,
    LABEL,
    MATCH,
    REV,
    RowData,
    Style,
    coverage,
    mark_events,
    mark_gaps,
    put_labels,
    raster_row,
    runs,
)
from gaplens.tui.viewmodel import build_model
from gaplens.tui.viewport import Viewport, fmt_tick, ruler_text, tick_step_ns
from tests.conftest import loaded


def row(spans, style=int(Style.KERNEL)) -> RowData:
    s = np.asarray([a for a, _ in spans], np.int64)
    e = np.asarray([b for _, b in spans], np.int64)
    return RowData.of_spans(s, e, style)


def text(r: RowData, edges) -> str:
    return raster_row(r, np.asarray(edges, np.int64)).text


def test_density_shades_by_busy_fraction():
    # Ten 8-ns cells; each holds two events covering 0, 2, 4, 6 or 8 ns of it.
    spans = [(0, 1), (7, 8), (8, 9), (10, 11), (16, 18), (20, 22), (24, 27), (29, 32), (32, 36), (36, 40)]
    spans += [(48, 50), (52, 54), (56, 62), (63, 64), (64, 68), (68, 72)]
    assert text(row(spans), range(0, 81, 8)) == "░░▒▓█ ▒██ "


def test_eighth_block_edges_when_zoomed_in():
    # One bar from 12 to 53 over 8-ns cells: starts 4/8 into cell 1, ends 5/8 into cell 6.
    assert text(row([(12, 53)]), range(0, 81, 8)) == " ▐████▋   "
    # Start 6/8 into a cell: the right-aligned remainder is drawn as a reversed left eighth.
    r = raster_row(row([(6, 40)]), np.arange(0, 81, 8, dtype=np.int64))
    assert r.text == "▊████     "  # the ▊ is the 6/8 gap, in the background colour
    assert r.style[0] & REV and not r.style[1] & REV


def test_lone_event_inside_a_cell_is_still_visible():
    assert text(row([(101, 102)]), [0, 100, 200, 300]) == " ░ "


def test_empty_row_and_no_events_in_view():
    assert text(row([]), range(0, 41, 8)) == "     "
    assert text(row([(1000, 2000)]), range(0, 41, 8)) == "     "


def test_name_inside_a_bar_when_it_fits():
    r = RowData.of_spans(np.asarray([0, 200]), np.asarray([120, 230]), int(Style.KERNEL), labels=["gemm_kernel", "x"])
    ras = raster_row(r, np.arange(0, 241, 10, dtype=np.int64))
    put_labels(ras, r, [], None)
    assert ras.text == "█gemm_kern…█        ███ "
    assert ras.style[1] & LABEL and not ras.style[0] & LABEL


def test_gap_marks_and_largest_highlight():
    busy = row([(0, 10), (50, 60), (70, 80)], int(Style.BUSY))
    edges = np.arange(0, 81, 10, dtype=np.int64)
    ras = raster_row(busy, edges)
    mark_gaps(ras, row([(10, 50), (60, 70)], int(Style.GAP)), (10, 50), edges)
    assert ras.text == "█━━━━█·█"
    assert ras.style[6] == int(Style.GAP) and ras.style[1] == int(Style.GAP_LARGEST)
    assert chr(GAP_GLYPH) == "·"


def test_search_matches_flag_the_cells_they_touch():
    r = RowData(
        np.asarray([0, 20, 40]),
        np.asarray([10, 30, 50]),
        np.asarray([10, 30, 50]),
        np.asarray([0, 10, 20, 30]),
        np.full(3, int(Style.KERNEL), np.int16),
        base=100,
    )
    edges = np.arange(0, 61, 10, dtype=np.int64)
    ras = raster_row(r, edges)
    mark_events(ras, r, np.asarray([101]), MATCH)
    assert [bool(s & MATCH) for s in ras.style] == [False, False, True, False, False, False]


def test_runs_cover_the_row_left_to_right():
    ras = raster_row(row([(0, 30), (50, 60)]), np.arange(0, 81, 10, dtype=np.int64))
    out = runs(ras)
    assert "".join(t for t, _ in out) == ras.text
    assert [s for _, s in out] == [int(Style.KERNEL), 0, int(Style.KERNEL), 0]


def test_monochrome_keeps_kinds_apart_by_glyph():
    edges = np.arange(0, 41, 10, dtype=np.int64)
    htod = raster_row(row([(0, 40)], int(Style.HTOD)), edges, mono=True).text
    sync = raster_row(row([(0, 40)], int(Style.SYNC)), edges, mono=True).text
    kernel = raster_row(row([(0, 40)], int(Style.KERNEL)), edges, mono=True).text
    assert len({htod, sync, kernel}) == 3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 500)), max_size=60), st.integers(1, 97))
def test_coverage_sums_to_busy_time(raw, cols):
    # Disjoint spans (as rows are): coverage × cell width summed equals busy time in view.
    pts = sorted({a for a, _ in raw})
    spans = []
    for k, a in enumerate(pts):
        nxt = pts[k + 1] if k + 1 < len(pts) else a + 500
        spans.append((a, min(a + dict(raw)[a], nxt)))
    r = row(spans)
    vp = Viewport(0, 11_000, cols, 0, 11_000)
    edges = vp.edges()
    cov = coverage(r, edges)
    total = float((cov * np.diff(edges)).sum())
    brute = sum(max(0, min(b, edges[-1]) - max(a, edges[0])) for a, b in spans)
    assert abs(total - brute) < 1e-6


def test_real_trace_coverage_matches_busy_total():
    """The device row of decode_eager sums to the union busy time (40.314 ms)."""
    model = build_model(loaded("decode_eager.json.gz"))
    busy = model.busy_rows[0]
    lo, hi = model.extent
    edges = Viewport.fit(lo, hi, 197).edges()
    total = float((coverage(busy, edges) * np.diff(edges)).sum())
    assert abs(total - 40.314e6) < 0.01e6


def test_viewport_zoom_keeps_the_anchor_column_and_clamps():
    vp = Viewport.fit(0, 1_000_000, 100)
    anchor = vp.time_of(30)
    z = vp.zoom(0.5, anchor)
    assert abs(z.col_of(anchor) - 30) <= 1 and abs(z.span_ns - vp.span_ns / 2) < 1
    deepest = vp
    for _ in range(60):
        deepest = deepest.zoom(0.5, anchor)
    assert deepest.ns_per_col == 1.0  # one nanosecond per column, no further
    out = vp
    for _ in range(10):
        out = out.zoom(2.0)
    assert out.span_ns <= 1.5 * 1_000_000 + 1
    assert vp.pan(-10_000).t0_ns >= -0.25 * vp.span_ns - 1  # never a screen of nothing


def test_viewport_show_and_reveal():
    vp = Viewport.fit(0, 10**9, 100)
    shown = vp.show(5_000, 6_000, fill=0.5)
    assert shown.contains(5_000, 6_000) and abs(shown.span_ns - 2_000) < 1
    assert shown.reveal(5_200, 5_300) is shown
    moved = shown.reveal(9_000_000, 9_000_100)
    assert moved.contains(9_000_000, 9_000_100) and moved.span_ns == shown.span_ns


def test_ruler_units_follow_zoom():
    assert tick_step_ns(1.0) == 20.0
    assert fmt_tick(50e6, 50e6) == "50ms"
    assert fmt_tick(2_000, 1_000) == "2µs"
    assert fmt_tick(1.5e9, 5e8) == "1.5s"
    assert ruler_text(Viewport(0, 6.4e8, 60, 0, 10**9)).startswith("▏0ms")
    deep = ruler_text(Viewport(468.7e6, 300, 100, 0, 10**9))
    assert "+" in deep and "ns" in deep


def test_headless_modules_do_not_load_textual():
    code = (
        "import sys, tui.raster, tui.viewport, tui.lanetree, tui.readings; "
        "print(any(m.split('.')[0] in ('textual', 'rich') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_batched_rows_equal_one_row_at_a_time():
    """The per-frame batch over all visible rows draws exactly what the single-row path draws."""
    from gaplens.tui.lanetree import RowKind, build_tree, visible_rows
    from gaplens.tui.raster import raster_rows

    model = build_model(loaded("decode_eager.json.gz"))
    rows = [r for r in visible_rows(build_tree(model.trace), set()) if r.kind == RowKind.EVENTS]
    datas = [model.row_data(r) for r in rows]
    lo, hi = model.extent
    views = (Viewport.fit(lo, hi, 150), Viewport(467e6, 500_000, 150, lo, hi), Viewport(468e6, 150, 150, lo, hi))
    for vp in views:
        edges = vp.edges()
        singles = [raster_row(d, edges) for d in datas]
        for one, many in zip(singles, raster_rows(datas, model.columns, edges), strict=True):
            assert one.text == many.text
            assert np.array_equal(one.style, many.style) and np.array_equal(one.lo, many.lo)


def test_viewer_paints_what_the_readings_count() -> None:
    """Communication and blocking calls take the readings' rules (``analysis.comm``, ``analysis.calls``).

    thread  [launch][launch][sync........][wait]
    stream7  ██vllm::cross_device_reduce██ ██gemm██

    A custom all-reduce is communication though its name says neither "nccl" nor "all_reduce";
    ``cudaStreamSynchronize`` blocks the host; ``cudaStreamWaitEvent`` does not (it queues a wait).
    """
    from gaplens.analysis.calls import Call, api_class
    from gaplens.analysis.comm import comm_mask
    from gaplens.tui.raster import event_styles
    from tests.handbuilt import Builder

    b = Builder()
    b.launch(0, 10, 20, 100, name="void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)")
    b.launch(10, 20, 100, 200, name="nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT")
    b.call(20, 200, "cudaStreamSynchronize")
    b.call(200, 210, "cudaStreamWaitEvent")
    tr = b.trace()
    style = event_styles(tr)
    by_name = {tr.name(i): Style(int(style[i])) for i in range(len(tr))}
    assert by_name["void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)"] == Style.COMM
    assert by_name["nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"] == Style.GEMM
    assert by_name["cudaLaunchKernel"] == Style.LAUNCH
    assert by_name["cudaStreamSynchronize"] == Style.SYNC
    assert by_name["cudaStreamWaitEvent"] == Style.API
    # The same sets as the readings', event for event.
    assert np.array_equal(style == int(Style.COMM), comm_mask(tr))
    assert np.array_equal(style == int(Style.SYNC), api_class(tr) == int(Call.SYNC))
