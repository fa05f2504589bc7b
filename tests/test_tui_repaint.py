"""Cursor and selection moves repaint only the rows they change (toolong's ``refresh_lines`` habit)."""

from __future__ import annotations

from gaplens.tui.lanetree import RowKind
from tests.pilot import readings_ready
from tests.test_tui_pilot import drive


def _count_rendered(tl) -> list[int]:
    drawn: list[int] = []
    render_row = tl.render_row

    def counting(i, raster=None):
        drawn.append(i)
        return render_row(i, raster)

    tl.render_row = counting
    return drawn


def test_j_repaints_two_rows_and_enter_only_the_selected_rows():
    async def body(app, pilot, tl):
        await readings_ready(app, pilot)  # late readings would repaint every row
        drawn = _count_rendered(tl)
        start = tl.row_cursor
        await pilot.press("j")
        await pilot.pause()
        assert sorted(set(drawn)) == [start, start + 1]
        # Selecting the next event of the same row (the details panel is open and keeps its height, the
        # two events being alike) repaints the rows the old and new selection are on, nothing else.
        row = next(k for k, r in enumerate(tl.rows) if r.kind == RowKind.EVENTS and r.depth == 0)
        tl.set_row_cursor(row)
        await pilot.press("i")
        tl.action_select()
        for _ in range(5):  # let the panel's layout settle: a busy box can lag a frame behind
            await pilot.pause()
        first = tl.selection
        assert first is not None and first.event >= 0
        tl.cursor_ns = first.t1_ns + 1
        while tl.model.event_at(tl.rows[row], tl.cursor_ns, 1) in (None, first.event):
            tl.cursor_ns += max(tl.viewport.ns_per_col, 1)
        drawn.clear()
        tl.action_select()
        await pilot.pause()
        assert tl.selection is not None and tl.selection.event != first.event
        assert len(set(drawn)) <= 3, sorted(set(drawn))

    drive("smells.json.gz", body, size=(120, 40))
