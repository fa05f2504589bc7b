"""Pilot tests of the finders: statistics (T), instances, lists of blank regions and smells (L), x/X,
go-to-time (t), markers (1/2), search totals, and the 80×24 layout after a jump to a blank region."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from textual.widgets import DataTable

from gaplens.analysis.smells import smells
from gaplens.analysis.stats import table_stats
from gaplens.analysis.units import fmt_ns
from gaplens.tui.raster import MARKER
from gaplens.tui.screens.goto import TimeScreen
from gaplens.tui.screens.lists import ListsScreen
from gaplens.tui.screens.stats import InstancesScreen, StatsScreen
from tests.test_tui_pilot import drive


async def _until(pilot, check, tries: int = 200) -> None:
    for _ in range(tries):
        await pilot.pause()
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition never held")


def _keys(table: DataTable) -> list[int]:
    return [int(table.coordinate_to_cell_key((r, 0)).row_key.value) for r in range(table.row_count)]


def test_statistics_sort_open_instances_and_jump_to_one():
    async def body(app, pilot, tl):
        st = table_stats(app.model.trace)["kernels"]
        await pilot.press("T")
        screen = app.screen
        assert isinstance(screen, StatsScreen)
        await _until(pilot, lambda: bool(screen.tables))
        table = screen.query_one("#stats-kernels", DataTable)
        assert table.row_count == len(st) and _keys(table) == list(range(len(st)))  # largest total first
        await pilot.press("s")  # next column: total → count
        assert screen.sort["kernels"] == ("count", True) and _keys(table) == st.order("count").tolist()
        await pilot.press("r")
        assert _keys(table) == st.order("count", descending=False).tolist()
        await pilot.press("2")
        assert screen.active == "cuda_api" and screen.query_one("#stats-cuda_api", DataTable).has_focus
        await pilot.press("1", "home", "enter")  # back to kernels, first row (fewest launches), its instances
        inst = app.screen
        assert isinstance(inst, InstancesScreen)
        k = _keys(table)[0]
        longest = int(st.instances(k)[-1])
        assert _keys(inst.query_one(DataTable))[0] == longest and inst.query_one(DataTable).row_count == st.count[k]
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is not inst and not isinstance(app.screen, StatsScreen)
        t = app.model.trace
        s, e = int(t.start_ns[longest]), int(t.end_ns[longest])
        assert tl.selection is not None and tl.selection.event == longest
        assert tl.viewport.t0_ns <= s and e <= tl.viewport.t1_ns and tl.viewport.span_ns <= 4 * max(e - s, tl.cols)

    drive("smells.json.gz", body)


def test_lists_of_blank_regions_and_smells_jump_to_the_pick():
    async def body(app, pilot, tl):
        gaps = app.model.readings.gaps
        dur = gaps.end - gaps.start
        await pilot.press("L")
        screen = app.screen
        assert isinstance(screen, ListsScreen)
        table = screen.query_one("#lists-gaps", DataTable)
        keys = _keys(table)
        assert table.row_count == len(gaps) and (np.diff(dur[keys]) <= 0).all()  # largest first
        await pilot.press("down", "enter")  # the second largest
        await pilot.pause()
        g = tl.selection.gap
        assert g is not None and (g.start_ns, g.end_ns) == (int(gaps.start[keys[1]]), int(gaps.end[keys[1]]))
        found = smells(app.model.trace)
        await pilot.press("L", "2")
        screen = app.screen
        await _until(pilot, lambda: screen.findings is not None)
        smells_table = screen.query_one("#lists-smells", DataTable)
        assert smells_table.row_count == len(found)
        smells_table.move_cursor(row=len(found) - 1)
        await pilot.press("enter")
        await pilot.pause()
        f = tl.selection.finding
        assert f is not None and (f.kind, f.start_ns) == (found[-1].kind, found[-1].start_ns)
        assert "lever" in str(app.query_one("#details").render())
        await pilot.press("L")  # the smells are kept: no second computation
        assert app.screen.findings is not None
        await pilot.press("escape")

    drive("smells.json.gz", body)


def test_x_walks_blank_regions_by_size_and_X_walks_back():
    async def body(app, pilot, tl):
        r = app.model.readings
        marked = r.marked()
        dur = (r.gaps.end - r.gaps.start)[marked]
        order = marked[np.lexsort((r.gaps.start[marked], -dur))]
        for k in (0, 1, 2):
            await pilot.press("x")
            assert tl.selection.gap.start_ns == int(r.gaps.start[order[k]])
        await pilot.press("X")
        assert tl.selection.gap.start_ns == int(r.gaps.start[order[1]])
        assert tl.selection.gap.start_ns == r.largest.start_ns or order[0] != order[1]
        assert "2 of" in str(app.query_one("#hint").render())

    drive("smells.json.gz", body)


@pytest.mark.parametrize(("typed", "want_ns"), [("50ms", 50_000_000), ("120.5 ms", 120_500_000), ("7000us", 7_000_000)])
def test_go_to_time_moves_the_cursor_there(typed, want_ns):
    async def body(app, pilot, tl):
        await pilot.press("t")
        assert isinstance(app.screen, TimeScreen)
        await pilot.press(*typed, "enter")
        await pilot.pause()
        assert tl.cursor_ns == want_ns and tl.viewport.t0_ns <= want_ns < tl.viewport.t1_ns

    drive("smells.json.gz", body)


def test_go_to_time_says_what_is_wrong_and_clamps_to_the_trace():
    async def body(app, pilot, tl):
        await pilot.press("colon", *"soon", "enter")
        assert isinstance(app.screen, TimeScreen)
        assert "not a time" in str(app.screen.query_one("#goto-error").render())
        app.screen.query_one("#goto-input").value = ""  # the prompt stayed open with "soon": retype
        await pilot.press(*"99s", "enter")
        await pilot.pause()
        assert tl.cursor_ns == app.model.extent[1]

    drive("smells.json.gz", body)


def test_markers_show_the_time_between_them():
    async def body(app, pilot, tl):
        await pilot.press("1")
        a = tl.cursor_ns
        await pilot.press(*["l"] * 10, "2")
        b = tl.cursor_ns
        header = str(app.query_one("#header").render())
        assert f"A→B {fmt_ns(b - a)}" in header
        ruler = str(app.query_one("#ruler").render())
        assert "A" in ruler and "B" in ruler
        r = tl.raster(tl.rows[0])
        assert r.style[tl.viewport.col_of(a)] & MARKER and r.style[tl.viewport.col_of(b)] & MARKER
        await pilot.press("2")  # again at the same place: B goes
        assert "b" not in tl.markers and "A at" in str(app.query_one("#header").render())

    drive("smells.json.gz", body)


def test_search_reports_count_and_total_and_zooms_to_each_match():
    async def body(app, pilot, tl):
        t = app.model.trace
        hits = np.flatnonzero([("launch" in t.names[i].lower()) for i in t.name_id.tolist()])
        total = int((t.end_ns[hits] - t.start_ns[hits]).sum())
        await pilot.press("slash", *"launch", "enter")
        await pilot.pause()
        header = str(app.query_one("#header").render())
        assert f"/launch {hits.size:,} · {fmt_ns(total)}" in header
        assert f"{hits.size:,} events match" in str(app.query_one("#hint").render())
        for _ in range(2):
            i = tl.selection.event
            s, e = int(t.start_ns[i]), int(t.end_ns[i])
            assert tl.viewport.t0_ns <= s and e <= tl.viewport.t1_ns
            assert tl.viewport.span_ns <= max(3 * (e - s), tl.cols)  # zoomed to the match, not just revealed
            await pilot.press("n")

    drive("smells.json.gz", body)


@pytest.mark.parametrize("name", ["decode_eager.json.gz", "smells.json.gz"])
def test_at_80x24_the_rows_that_explain_the_largest_gap_stay_on_screen(name):
    """After `c` the details panel used to leave only the GPU rows; the CPU/API rows of the evidence stay visible."""

    async def body(app, pilot, tl):
        await pilot.press("c")
        await pilot.pause()
        await pilot.pause()
        g = tl.selection.gap
        top, height = tl.scroll_offset.y, tl.scrollable_content_region.height
        shown = {tl.rows[k].lane for k in range(top, min(top + height, len(tl.rows)))}
        lanes = {int(app.model.trace.lane[i]) for i in g.evidence}
        host = {ln for ln in lanes if not app.model.trace.lanes[ln].is_gpu}
        assert host and host <= shown
        assert top <= tl.row_cursor < top + height
        assert len(str(app.query_one("#details").render()).splitlines()) <= 4

    drive(name, body, size=(80, 24))
