"""Cursor and selection moves repaint only the rows they change (toolong's ``refresh_lines`` habit)."""

from __future__ import annotations

from gaplens.tui.lanetree import RowKind
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
        await pilot.pause()
        drawn = _count_rendered(tl)
        start = tl.row_cursor
        await pilot.press("j")
        await pilot.pause()
        assert sorted(set(drawn)) == [start, start + 1]
        # Selecting an event (the details panel is already open, so the height stays) repaints its row only.
        row = next(k for k, r in enumerate(tl.rows) if r.kind == RowKind.EVENTS and r.depth == 0)
        tl.set_row_cursor(row)
        await pilot.press("i")
        for _ in range(5):  # let the panel's layout settle: a busy box can lag a frame behind
            await pilot.pause()
        drawn.clear()
        tl.action_select()
        await pilot.pause()
        assert tl.selection is not None and len(set(drawn)) <= 3

    drive("smells.json.gz", body, size=(120, 40))
