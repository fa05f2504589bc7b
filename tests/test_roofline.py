"""The roofline screen (`F`) and the statistics screen's floor column: Pilot and SVG snapshot tests.

shapes_stack (H200, record_shapes): 48 bf16 mm of 64x2048 by 2048x2048, elementwise ops, pinned copies.
Expectations come from the raw JSON (which kernel is the longest aten::mm instance) and the table's
H200 row, not from the screen's own numbers.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path

from textual.widgets import DataTable, Static

from gaplens.loaders import load
from gaplens.tui.app import make_app
from gaplens.tui.screens.roofline import RooflineScreen
from gaplens.tui.screens.stats import StatsScreen
from tests.pilot import readings_ready, snapshot_ready

DATA = Path(__file__).parent / "data"
TRACE = DATA / "shapes_stack.json.gz"


def _longest_mm_kernel() -> tuple[int, float]:
    with gzip.open(TRACE) as fh:
        ev = json.load(fh)["traceEvents"]
    mm = {e["args"]["External id"] for e in ev if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"}
    kernels = [e for e in ev if e.get("cat") == "kernel" and e["args"]["External id"] in mm]
    k = max(kernels, key=lambda e: e["dur"])
    return k["args"]["correlation"], k["dur"]


async def _screen(pilot, kind, tries: int = 400):
    for _ in range(tries):
        await pilot.pause()
        screen = pilot.app.screen
        if isinstance(screen, kind) and screen.query_one(DataTable).row_count:
            return screen
        await asyncio.sleep(0.02)
    raise AssertionError(f"{kind.__name__} never filled")


def test_roofline_opens_plots_and_jumps_to_the_longest_instance():
    trace = load(str(TRACE))
    app = make_app(trace)
    corr, dur_us = _longest_mm_kernel()

    async def main() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            tl = await readings_ready(app, pilot)
            await pilot.press("F")
            screen = await _screen(pilot, RooflineScreen)
            plot = str(screen.query_one("#roofline-plot", Static).render())
            assert "bf16/fp16 990T" in plot and "fp8 1,979T" in plot  # the H200 row's dense roofs, labelled
            assert "╱" in plot and "●1" in plot  # memory slope; the mm family, ranked first, ≥ 20% of time
            title = str(screen.query_one("#roofline-title", Static).render())
            assert "NVIDIA H200" in title and "4.80 TB/s" in title
            table = screen.query_one(DataTable)
            first = [str(c) for c in table.get_row_at(0)]
            assert first[1] == "aten::mm" and first[2] == "bf16" and first[5] == "memory"
            await pilot.press("enter")
            await pilot.pause()
            assert not isinstance(app.screen, RooflineScreen)
            assert tl.selection is not None
            i = tl.selection.event
            assert int(trace.corr[i]) == corr
            assert abs(int(trace.end_ns[i] - trace.start_ns[i]) - dur_us * 1000) <= 1

    asyncio.run(main())


def test_stats_kernels_carry_a_floor_column():
    app = make_app(load(str(TRACE)))

    async def main() -> None:
        async with app.run_test(size=(140, 40)) as pilot:
            await readings_ready(app, pilot)
            await pilot.press("T")
            screen = await _screen(pilot, StatsScreen)
            for _ in range(200):  # the floor column arrives after the table
                await pilot.pause()
                if screen.floor_pct is not None:
                    break
                await asyncio.sleep(0.02)
            table = screen.query_one("#stats-kernels", DataTable)
            labels = [str(c.label) for c in table.columns.values()]
            assert any(lab.startswith("floor %") for lab in labels)
            rows = [[str(c) for c in table.get_row_at(r)] for r in range(table.row_count)]
            nvjet = [r for r in rows if r[-1].startswith("nvjet")]
            assert nvjet and nvjet[0][-2].endswith("%")

    asyncio.run(main())


def test_roofline_snapshot(snap_compare):
    """`F` on shapes_stack: the bf16/fp8/tf32/fp32 roofs of the H200 row, the memory slope, mm as ●1."""

    async def ready(pilot) -> None:
        await snapshot_ready(pilot)
        await pilot.press("F")
        await _screen(pilot, RooflineScreen)
        await pilot.pause()

    assert snap_compare(make_app(load(str(TRACE)), mono=False), terminal_size=(120, 36), run_before=ready)


def test_roofline_plot_keeps_every_ranked_point_readable():
    """floor_calib: many GEMMs near 790 TFLOP/s share cells; every plotted family's rank still appears once."""
    import re

    from gaplens.analysis.floor.floors import floors
    from gaplens.analysis.floor.windows import op_rows
    from gaplens.tui.screens.roofline import MAX_POINTS, plot

    trace = load(str(DATA / "round3" / "floor_calib.json.gz"))
    rows = op_rows(trace)
    text = plot(rows, floors(trace).matches[0].spec).plain
    ranks = [k for k, r in enumerate(rows, 1) if r["flops"] and r["bytes"] and r["sized_ns"] > 0][:MAX_POINTS]
    marks = re.findall(r"[·•●](\d+)", text)
    assert sorted(int(m) for m in marks) == ranks
    assert "fp8 1,979T" in text and "bf16/fp16 990T" in text and "tf32 494T" in text and "fp64/fp32 67T" in text


def test_roofline_at_80x24_keeps_table_rows_and_names_roofs_truthfully():
    """At 80x24 the chart gives up rows (8 table rows stay); roofs that share a line of the shorter plot are
    named together, whole (a roof is never labelled with another's peak); ``v`` hides the chart."""
    import re

    from gaplens.tui.screens.roofline import PLOT_H, TABLE_MIN_ROWS, plot_height

    assert plot_height(40) == PLOT_H and plot_height(16) == 6 and plot_height(0) == 6
    trace = load(str(TRACE))
    app = make_app(trace)

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await readings_ready(app, pilot)
            await pilot.press("F")
            screen = await _screen(pilot, RooflineScreen)
            await pilot.pause()
            table = screen.query_one(DataTable)
            footer = 1
            assert 24 - footer - table.region.y - 1 >= TABLE_MIN_ROWS  # room under the plot: header + 8 rows
            plot = str(screen.query_one("#roofline-plot", Static).render())
            assert plot.count("┤") < PLOT_H  # the plot's own rows: fewer than on a tall screen
            for name, peak in re.findall(r"([a-z0-9/]+) ([\d,]+)T", plot):
                want = {"fp8": "1,979", "bf16/fp16": "990", "tf32": "494", "fp64/fp32": "67"}[name]
                assert peak == want, (name, peak)
            await pilot.press("v")
            await pilot.pause()
            assert not screen.query_one("#roofline-plot", Static).display
            assert table.region.y <= 4  # right under the title

    asyncio.run(main())
