"""Pilot tests: every key of the viewer on real samples, asserting the viewport and selection that result."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np
import pytest

from gaplens.loaders.model import Kind, LaneKind
from gaplens.tui.app import GaplensApp, make_app
from gaplens.tui.keys import KEYS
from gaplens.tui.lanetree import RowKind
from gaplens.tui.timeline import Timeline
from tests.conftest import loaded, sample
from tests.pilot import readings_ready

Body = Callable[[GaplensApp, object, Timeline], Awaitable[None]]


def drive(name: str, body: Body, size=(120, 40)) -> GaplensApp:
    app = make_app(loaded(name))

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            tl = await readings_ready(app, pilot)
            await body(app, pilot, tl)

    asyncio.run(main())
    return app


def test_loads_a_path_in_a_worker_and_shows_the_header():
    app = make_app(str(sample("smells.json.gz")))

    async def main() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            tl = await readings_ready(app, pilot)
            header = str(app.query_one("#header").render())
            assert "smells.json.gz" in header and "GPU busy" in header and "NVIDIA H200" in header
            assert tl.rows and tl.rows[0].kind == RowKind.BUSY  # the device leads
            lo, hi = app.model.extent
            assert tl.viewport.contains(lo, hi)  # first frame fits the whole trace

    asyncio.run(main())


def test_unusable_file_exits_with_status_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("not a trace")
    app = make_app(str(bad))

    async def main() -> None:
        async with app.run_test() as pilot:
            await readings_ready(app, pilot)

    asyncio.run(main())
    assert app.return_code == 2 and "not a trace" in app.error


def test_zoom_keys_scale_at_the_cursor_and_fit_restores():
    async def body(app, pilot, tl):
        full = tl.viewport
        cursor = tl.cursor_ns
        col = full.col_of(cursor)
        for key in ("plus", "w"):
            before = tl.viewport.span_ns
            await pilot.press(key)
            assert tl.viewport.span_ns == pytest.approx(before / 2)
            assert abs(tl.viewport.col_of(cursor) - col) <= 1
        for key in ("minus", "s"):
            before = tl.viewport.span_ns
            await pilot.press(key)
            assert tl.viewport.span_ns == pytest.approx(before * 2)
        await pilot.press("w", "w", "w")
        await pilot.press("0")
        assert tl.viewport.contains(*app.model.extent)
        await pilot.press("w", "f")
        assert tl.viewport.contains(*app.model.window)
        assert tl.viewport.span_ns == pytest.approx(full.span_ns, rel=1e-3)

    drive("decode_eager.json.gz", body)


def test_pan_keys_and_time_cursor():
    async def body(app, pilot, tl):
        await pilot.press("w", "w", "w")
        vp = tl.viewport
        await pilot.press("d")
        assert tl.viewport.t0_ns == pytest.approx(vp.t0_ns + 0.125 * vp.span_ns, rel=1e-6)
        await pilot.press("a")
        assert tl.viewport.t0_ns == pytest.approx(vp.t0_ns, rel=1e-6)
        for key, sign in (("shift+right", 1), ("D", 1), ("shift+left", -1), ("A", -1)):
            before = tl.viewport.t0_ns
            await pilot.press(key)
            assert (tl.viewport.t0_ns - before) * sign == pytest.approx(0.9 * vp.span_ns, rel=1e-6)
        for key, sign in (("right", 1), ("l", 1), ("left", -1), ("h", -1)):
            before = tl.cursor_ns
            await pilot.press(key)
            assert (tl.cursor_ns - before) * sign == pytest.approx(tl.viewport.ns_per_col, rel=1e-6)
        # Walking the cursor off the right edge pans the view along.
        t0 = tl.viewport.t0_ns
        tl.cursor_ns = tl.viewport.time_of(tl.viewport.cols - 2.5)
        for _ in range(4):
            await pilot.press("l")
        assert tl.viewport.t0_ns > t0 and tl.viewport.t0_ns <= tl.cursor_ns < tl.viewport.t1_ns
        for key, step in (("down", 1), ("j", 1), ("up", -1), ("k", -1)):
            before = tl.row_cursor
            await pilot.press(key)
            assert tl.row_cursor == before + step

    drive("decode_eager.json.gz", body)


def test_next_and_previous_blank_region_come_into_view():
    async def body(app, pilot, tl):
        await pilot.press("w", "w", "w")
        await pilot.press("g")
        first = tl.selection.gap
        assert first is not None and tl.viewport.contains(first.start_ns, first.end_ns)
        assert first.end_ns - first.start_ns >= tl.viewport.ns_per_col
        assert tl.rows[tl.row_cursor].kind == RowKind.BUSY
        await pilot.press("g")
        second = tl.selection.gap
        assert second.start_ns > first.start_ns and tl.viewport.contains(second.start_ns, second.end_ns)
        await pilot.press("G")
        assert tl.selection.gap == first
        assert app.query_one("#details").display  # details opened with the selection

    drive("smells.json.gz", body)


def test_largest_blank_region_then_zoom_to_selection():
    async def body(app, pilot, tl):
        await pilot.press("c")
        g = app.model.readings.largest
        assert tl.selection.gap == g and tl.viewport.contains(g.start_ns, g.end_ns)
        assert tl.viewport.span_ns == pytest.approx((g.end_ns - g.start_ns) / 0.6, rel=1e-3)
        await pilot.press("z")
        assert tl.viewport.span_ns == pytest.approx((g.end_ns - g.start_ns) / 0.8, rel=1e-3)
        details = str(app.query_one("#details").render())
        assert "blank" in details and "the largest on the critical path" in details

    drive("decode_eager.json.gz", body)


def _first_launch(trace) -> tuple[int, int]:
    """A cudaLaunchKernel with a kernel behind it, and the row showing its CUDA API lane."""
    api = np.flatnonzero((trace.kind == int(Kind.CUDA_API)) & (trace.depth == 0))
    launched = trace.launch[trace.launch >= 0]
    i = int(next(a for a in api.tolist() if a in set(launched.tolist()) and "LaunchKernel" in trace.name(a)))
    return i, int(trace.lane[i])


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
def test_enter_selects_under_the_cursor_and_flow_jumps_both_ways(size):
    async def body(app, pilot, tl):
        trace = app.model.trace
        i, lane = _first_launch(trace)
        assert trace.lanes[lane].kind == LaneKind.CUDA_API
        tl.set_row_cursor(next(k for k, r in enumerate(tl.rows) if r.lane == lane))
        s, e = int(trace.start_ns[i]), int(trace.end_ns[i])
        tl.set_viewport(tl.viewport.show(s, e))
        tl.cursor_ns = (s + e) / 2
        await pilot.press("enter")
        assert tl.selection.event == i
        await pilot.press("o")
        k = tl.selection.event
        assert int(trace.kind[k]) == int(Kind.KERNEL) and trace.corr[k] == trace.corr[i]
        assert tl.viewport.contains(int(trace.start_ns[k]), int(trace.end_ns[k]))
        assert tl.rows[tl.row_cursor].lane == int(trace.lane[k])
        await pilot.press("o")
        assert tl.selection.event == i
        top = tl.scroll_offset.y  # the launch row is scrolled into view on a small terminal
        assert top <= tl.row_cursor < top + tl.scrollable_content_region.height
        await pilot.press("escape")
        assert tl.selection is None

    drive("decode_eager.json.gz", body, size=size)


def test_search_marks_matches_and_n_walks_them_in_time_order():
    async def body(app, pilot, tl):
        await pilot.press("slash")
        await pilot.press(*"cudaStreamSynchronize", "enter")
        await pilot.pause()
        trace = app.model.trace
        assert tl.matches.size == 161  # the README's count of sync calls in decode_eager
        first = tl.selection.event
        assert trace.name(first) == "cudaStreamSynchronize"
        await pilot.press("n")
        second = tl.selection.event
        assert trace.start_ns[second] > trace.start_ns[first]
        assert tl.viewport.contains(int(trace.start_ns[second]), int(trace.end_ns[second]))
        await pilot.press("N")
        assert tl.selection.event == first
        row = tl.rows[tl.row_cursor]
        strip = tl.render_row(tl.row_cursor)
        assert row.lane == int(trace.lane[first]) and any(
            seg.style and seg.style.underline for seg in strip
        )  # the match is marked on its row

    drive("decode_eager.json.gz", body)


def test_phase_filter_limits_the_view():
    async def body(app, pilot, tl):
        await pilot.press("p")
        await pilot.pause()
        phases = app.model.readings.phases
        k = next(i for i, p in enumerate(phases) if p.name == "decode")
        for _ in range(k + 1):
            await pilot.press("down")
        await pilot.press("enter")
        await pilot.pause()
        p = phases[k]
        assert tl.phase == p and tl.viewport.contains(p.start_ns, p.end_ns)
        assert tl.viewport.span_ns < 1.1 * p.dur_ns
        assert "phase decode" in str(app.query_one("#header").render())
        await pilot.press("g")
        assert p.start_ns <= tl.selection.gap.start_ns < p.end_ns

    drive("decode_eager.json.gz", body)


def test_space_collapses_and_expands_a_group():
    async def body(app, pilot, tl):
        n = len(tl.rows)
        tl.set_row_cursor(next(k for k, r in enumerate(tl.rows) if r.node.startswith("p:")))
        await pilot.press("space")
        assert len(tl.rows) < n and tl.rows[tl.row_cursor].label.startswith("python3")
        await pilot.press("space")
        assert len(tl.rows) == n

    drive("smells.json.gz", body)


def test_help_details_palette_and_quit():
    async def body(app, pilot, tl):
        await pilot.press("question_mark")
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape")
        assert app.screen.query(Timeline)
        await pilot.press("c")
        details = app.query_one("#details")
        assert details.display
        await pilot.press("i")
        assert not details.display
        commands = {c.title: c for c in app.get_system_commands(app.screen)}
        assert {desc for _, _, desc, _ in KEYS} <= set(commands)  # every action is in the palette
        span = tl.viewport.span_ns
        app.call_later(commands["Zoom in at the cursor"].callback)  # as the palette runs a command
        await pilot.pause()
        await pilot.pause()
        assert tl.viewport.span_ns == pytest.approx(span / 2)
        await pilot.press("q")

    app = drive("smells.json.gz", body)
    assert app.return_code == 0


def test_resize_relays_out():
    async def body(app, pilot, tl):
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert tl.viewport.cols == 80 - tl.label_width - 1 or tl.viewport.cols == 80 - tl.label_width
        await pilot.resize_terminal(200, 60)
        await pilot.pause()
        assert tl.viewport.cols >= 200 - tl.label_width - 1

    drive("smells.json.gz", body)
