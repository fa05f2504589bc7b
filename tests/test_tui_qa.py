"""Regressions found by driving the viewer by hand: each test failed before its fix."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from textual.geometry import Region

from gaplens.analysis.units import fmt_ns
from gaplens.loaders.model import GPU_WORK_KINDS, Kind
from gaplens.tui.app import make_app
from gaplens.tui.details import describe
from gaplens.tui.lanetree import DEPTH_CAP, RowKind, gutter_label
from gaplens.tui.raster import SELECTED
from gaplens.tui.timeline import Timeline
from gaplens.tui.viewmodel import build_model
from gaplens.tui.viewport import Viewport
from tests.conftest import loaded, sample
from tests.pilot import readings_ready
from tests.test_tui_pilot import drive


def test_a_selected_event_nested_below_the_cap_gets_a_row_with_the_selection_marked():
    async def body(app, pilot, tl):
        t = app.model.trace
        deep = np.flatnonzero(t.depth >= DEPTH_CAP)
        i = int(deep[len(deep) // 2])  # a "decode_step N" annotation at depth 4
        lane, depth = int(t.lane[i]), int(t.depth[i])
        tl.select_event(i)
        await pilot.pause()
        row = tl.rows[tl.row_cursor]
        assert (row.lane, row.depth) == (lane, depth)
        assert f"┆d{depth}" in gutter_label(row, tl.collapsed, tl.label_width)
        r = tl.raster(row)
        col = tl.viewport.col_of((int(t.start_ns[i]) + int(t.end_ns[i])) / 2)
        assert r.style[col] & SELECTED
        assert t.name(i) in r.text or r.hi[col] - r.lo[col] >= 1  # the event is drawn there
        # Enter on that row selects the deep event again rather than its parent.
        tl.cursor_ns = (int(t.start_ns[i]) + int(t.end_ns[i])) / 2
        await pilot.press("enter")
        assert tl.selection.event == i
        # Clearing the selection gives the "+N" row back its own level.
        await pilot.press("escape")
        row = tl.rows[tl.row_cursor]
        assert row.kind == RowKind.EVENTS and row.depth == DEPTH_CAP - 1 and row.more > 0

    drive("decode_eager.json.gz", body, size=(80, 24))


def test_jumping_to_an_event_expands_only_what_hides_it():
    async def body(app, pilot, tl):
        t = app.model.trace
        gpu = next(r for r in tl.rows if r.kind == RowKind.BUSY)
        cpu_lane = next(r for r in tl.rows if r.kind == RowKind.EVENTS and r.device < 0)
        proc = next(r for r in tl.rows if r.node == f"p:{t.lanes[cpu_lane.lane].pid}")
        tl.toggle(gpu.node)
        tl.toggle(proc.node)
        i = int(t.row_offsets[cpu_lane.trace_row])
        tl.select_event(i)
        await pilot.pause()
        assert tl.rows[tl.row_cursor].lane == cpu_lane.lane
        assert gpu.node in tl.collapsed and proc.node not in tl.collapsed

    drive("decode_eager.json.gz", body)


def test_load_warnings_are_shown_not_swallowed(tmp_path):
    """A truncated trace opens with what was kept, and says so (the CLI prints the same warning)."""
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(sample("smells.json.gz").read_bytes()[:5000])
    app = make_app(str(cut))

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            tl = await readings_ready(app, pilot)
            assert tl is not None and app.model.trace.meta.warnings
            shown = [n.message for n in app._notifications]
            assert any("truncated" in m for m in shown)

    asyncio.run(main())


@pytest.mark.parametrize("rows", [24, 40])
def test_details_lines_are_cut_not_wrapped_at_80_columns(rows):
    """A long kernel name in the evidence must not wrap and push later lines out of the panel.
    At 24 rows the panel is compact (4 lines at most), so the rows that explain the gap stay on screen."""
    from gaplens.tui.details import COMPACT_LINES

    async def body(app, pilot, tl):
        await pilot.press("c")
        await pilot.pause()
        d = app.query_one("#details")
        box = Region(0, 0, d.outer_size.width, d.outer_size.height)
        lines = [s.text for s in d.render_lines(box)][1:]  # the rows under the border
        compact = rows < 32
        labels = [label for label, _ in describe(app.model, tl.selection, compact)]
        assert len(lines) == len(labels)
        assert len(labels) <= COMPACT_LINES if compact else len(labels) >= 7
        assert [line.split()[0] for line in lines] == [label.split()[0] for label in labels]

    drive("decode_eager.json.gz", body, size=(80, rows))


def test_header_keeps_the_busy_share_on_a_narrow_terminal():
    """At 80 columns a long file name pushed "GPU busy N%" off the header; now the least useful items go first."""

    async def body(app, pilot, tl):
        for width in (80, 120, 200):
            await pilot.resize_terminal(width, 24)
            await pilot.pause()
            header = str(app.query_one("#header").render())
            # Derived from the trace: it holds no GPU work, so nothing is busy and the window is the capture.
            t = app.model.trace
            assert not t.mask(GPU_WORK_KINDS).any()
            window = f"window {fmt_ns(int(t.end_ns.max() - t.start_ns.min()))}"
            assert "GPU busy 0.0%" in header and window in header and "…" not in header
            assert ("view " in header) == (width >= 120)
            assert ("events" in header) == (width >= 200)

    drive("edge/nsys2022_decode_eager_no_kernels.sqlite.gz", body, size=(80, 24))


def test_g_and_c_explain_when_no_blank_region_is_on_the_critical_path():
    """A capture without its host side: no gap is on the path. "No blank regions (yet)" was wrong;
    g says none is on the path, and c still shows the largest one, saying it is off the path."""
    from gaplens.loaders.events import EventColumns
    from gaplens.loaders.model import Device, Kind, LaneKind, Meta

    cols = EventColumns()
    for k, (s, e) in enumerate([(0, 100), (300, 400), (450, 900)]):
        cols.add((LaneKind.STREAM, 0, 7), s, e, f"k{k}", Kind.KERNEL, k)
    app = make_app(cols.finish(Meta("nsys", path="gpu_only.sqlite", devices=[Device(0, "GPU 0")]), None))

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            tl = await readings_ready(app, pilot)
            assert len(app.model.readings.gaps) == 2 and not app.model.readings.marked().size
            await pilot.press("g")
            assert "None of the 2 blank regions is on the critical path" in list(app._notifications)[-1].message
            await pilot.press("c")
            assert tl.selection is not None and tl.selection.gap is not None
            assert (tl.selection.gap.start_ns, tl.selection.gap.end_ns) == (100, 300)
            assert "this is the largest blank region (unknown)" in list(app._notifications)[-1].message

    asyncio.run(main())


def test_the_palette_names_keys_as_typed():
    """The palette said "keys: question_mark" and "keys: slash"; it now says "?" and "/" like the help screen."""

    async def body(app, pilot, tl):
        helps = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert helps["Help"] == "keys: ?" and helps["Search by name"] == "keys: /"
        assert helps["Zoom in at the cursor"] == "keys: + = w"
        assert not any("_" in h for title, h in helps.items() if h.startswith("keys:"))

    drive("smells.json.gz", body)


def test_space_on_a_one_row_lane_folds_its_thread_and_keeps_the_cursor_there():
    """Space on "CUDA API" (nothing to fold) did nothing visible; collapsing then jumped the cursor to row 0."""

    async def body(app, pilot, tl):
        n = len(tl.rows)
        k = next(k for k, r in enumerate(tl.rows) if r.label == "CUDA API" and not r.heads)
        tl.set_row_cursor(k)
        thread = tl.rows[k].lane
        await pilot.press("space")
        assert len(tl.rows) < n
        head = tl.rows[tl.row_cursor]
        assert head.heads and head.node.startswith("t:") and head.node in tl.collapsed
        assert not any(r.lane == thread for r in tl.rows)
        top = tl.scroll_offset.y
        assert top <= tl.row_cursor < top + tl.scrollable_content_region.height
        await pilot.press("space")
        assert len(tl.rows) == n and tl.rows[tl.row_cursor] == head

    drive("decode_eager.json.gz", body, size=(80, 24))


def test_i_and_enter_with_nothing_selected_say_how_to_select():
    """`i` before any selection opened an empty panel; enter on an empty cell cleared the panel without a word."""

    async def body(app, pilot, tl):
        await pilot.press("i")
        details = app.query_one("#details")
        assert details.display and "press enter" in str(details.render())
        await pilot.press("i")
        stream = next(k for k, r in enumerate(tl.rows) if r.kind == RowKind.EVENTS and r.device >= 0)
        tl.set_row_cursor(stream)
        g = app.model.readings.largest  # the stream is idle in the middle of the largest blank region
        tl.cursor_ns = (g.start_ns + g.end_ns) / 2
        tl.set_viewport(tl.viewport.show(g.start_ns, g.end_ns))
        await pilot.press("enter")
        assert tl.selection is None
        assert any("Nothing under the cursor" in n.message for n in app._notifications)

    drive("smells.json.gz", body, size=(80, 24))


def test_clicking_a_bar_selects_it():
    """on_click called the async run_action without awaiting it, so a click moved the cursor but selected nothing."""

    async def body(app, pilot, tl):
        t = app.model.trace
        k = next(k for k, r in enumerate(tl.rows) if r.kind == RowKind.EVENTS and r.label == "annotations")
        x = tl.label_width + tl.viewport.cols // 2
        await pilot.click(Timeline, offset=(x, k - tl.scroll_offset.y))
        await pilot.pause()
        assert tl.row_cursor == k
        sel = tl.selection
        assert sel is not None and sel.event >= 0 and t.name(sel.event) == "ProfilerStep#1"
        assert app.query_one("#details").display

    drive("decode_eager.json.gz", body)


def test_help_explains_the_deep_row_marker_and_the_mouse():
    from gaplens.tui.screens.help import LEGEND

    glyphs = {glyph for glyph, _ in LEGEND}
    assert "┆dN" in glyphs and "mouse" in glyphs


def test_help_and_quit_are_visible_in_the_footer_at_80_columns():
    """The footer is cut at 80 columns; "? help" and "q quit" came last and were cut off, and then
    `o`, `/` and `p` were cut after `c`: the keys that explain a blank region now come before zoom."""
    from textual.widgets._footer import FooterKey

    async def body(app, pilot, tl):
        shown = {k.action: k.region for k in app.query(FooterKey)}
        for action in ("app.help", "app.quit", "app.search", "largest_gap", "next_gap", "flow", "app.phase"):
            assert shown[action].width and shown[action].right <= 80 - len("^p palette"), action

    drive("smells.json.gz", body, size=(80, 24))


def test_the_row_cursor_stays_on_its_row_when_the_readings_add_phase_rows():
    """Readings arrive after the first frame and insert phase rows; the cursor used to stay on a row number."""

    async def body(app, pilot, tl):
        k = next(k for k, r in enumerate(tl.rows) if r.label == "CUDA API")
        tl.set_row_cursor(k)
        row = tl.rows[k]
        tl.set_model(build_model(app.model.trace))  # the same trace before its readings: no phase rows
        assert tl.rows[tl.row_cursor] == row and tl.row_cursor < k
        tl.set_model(app.model)
        assert tl.rows[tl.row_cursor] == row and tl.row_cursor == k

    drive("decode_eager.json.gz", body, size=(80, 24))


def test_opening_the_details_panel_keeps_the_cursor_row_in_view():
    """At 80x24 the cursor on the last visible row went under the details panel that its selection opened."""

    async def body(app, pilot, tl):
        t = app.model.trace
        k = next(k for k, r in enumerate(tl.rows) if r.label == "CUDA API")
        assert k < tl.scrollable_content_region.height  # visible before the panel opens
        for _ in range(k):
            await pilot.press("j")
        i = int(t.row_offsets[tl.rows[k].trace_row]) + 100
        tl.cursor_ns = (int(t.start_ns[i]) + int(t.end_ns[i])) / 2
        await pilot.press("enter")
        await pilot.pause()
        assert tl.selection is not None and app.query_one("#details").display
        top = tl.scroll_offset.y
        assert top <= tl.row_cursor < top + tl.scrollable_content_region.height

    drive("decode_eager.json.gz", body, size=(80, 24))


def test_a_jump_outside_the_phase_filter_leaves_the_filter_and_shows_the_target():
    """Filtered to "transfer", `c` selected the tokenize gap but the view stayed clamped to the phase."""

    async def body(app, pilot, tl):
        p = next(p for p in app.model.readings.phases if p.name == "transfer")
        tl.phase = p
        tl.set_viewport(Viewport.fit(p.start_ns, p.end_ns, tl.cols))
        await pilot.press("c")
        g = tl.selection.gap
        assert tl.phase is None and tl.viewport.contains(g.start_ns, g.end_ns)
        assert "phase" not in str(app.query_one("#header").render())
        # A jump inside the phase keeps the filter.
        tl.phase = p
        tl.set_viewport(Viewport.fit(p.start_ns, p.end_ns, tl.cols))
        t = app.model.trace
        i = int(np.flatnonzero((t.start_ns >= p.start_ns) & (t.end_ns <= p.end_ns) & (t.depth == 0))[0])
        tl.select_event(i)
        assert tl.phase == p

    drive("smells.json.gz", body)


def test_enter_on_the_busy_gpu_row_selects_the_op_that_kept_it_busy():
    """Enter on the device row selected only blank regions; over busy cells it did nothing."""

    async def body(app, pilot, tl):
        t = app.model.trace
        k = int(np.flatnonzero(t.kind == int(Kind.KERNEL))[len(np.flatnonzero(t.kind == int(Kind.KERNEL))) // 2])
        s, e = int(t.start_ns[k]), int(t.end_ns[k])
        tl.set_row_cursor(0)
        assert tl.rows[0].kind == RowKind.BUSY
        tl.set_viewport(tl.viewport.show(s, e))
        tl.cursor_ns = (s + e) / 2
        await pilot.press("enter")
        assert tl.selection is not None and tl.selection.event == k
        assert tl.rows[tl.row_cursor].lane == int(t.lane[k])  # the cursor moved to the op's stream
        await pilot.press("o")
        assert tl.selection.event == int(t.launch[k])

    drive("decode_eager.json.gz", body)


def test_home_and_end_move_the_row_cursor_with_the_scroll():
    """home/end (inherited from ScrollableContainer) scrolled the rows but left the cursor off screen."""

    async def body(app, pilot, tl):
        await pilot.press("end")
        await pilot.pause()
        assert tl.row_cursor == len(tl.rows) - 1
        top = tl.scroll_offset.y
        assert top <= tl.row_cursor < top + tl.scrollable_content_region.height
        await pilot.press("home")
        await pilot.pause()
        assert tl.row_cursor == 0 and tl.scroll_offset.y == 0

    drive("train_step.json.gz", body, size=(80, 24))


def test_g_on_a_trace_without_gpu_activity_says_so():
    async def body(app, pilot, tl):
        await pilot.press("g")
        assert any("No GPU activity" in n.message for n in app._notifications)

    drive("edge/nsys2022_decode_eager_no_kernels.sqlite.gz", body, size=(80, 24))


def test_header_says_analysing_until_the_readings_arrive(monkeypatch):
    """On 1M events the readings take seconds; g/c answered "no blank regions" with no sign of work in progress."""
    import threading

    import gaplens.tui.app

    release = threading.Event()
    compute = gaplens.tui.app.compute

    def slow(trace):
        release.wait(10)
        return compute(trace)

    monkeypatch.setattr(gaplens.tui.app, "compute", slow)
    app = make_app(loaded("smells.json.gz"))

    async def main() -> None:
        async with app.run_test(size=(120, 30)) as pilot:
            for _ in range(100):
                await pilot.pause()
                if app.model is not None:
                    break
            assert "analysing gaps…" in str(app.query_one("#header").render())
            await pilot.press("c")
            assert any("Still analysing" in n.message for n in app._notifications)
            release.set()
            await readings_ready(app, pilot)
            assert "analysing" not in str(app.query_one("#header").render())

    asyncio.run(main())


def test_q_quits_at_once_even_while_loading_or_analysing(tmp_path):
    """q did nothing on the loading screen, and after quitting the process waited for the analysis thread."""
    import contextlib
    import os
    import pty
    import select
    import sys
    import time

    script = tmp_path / "slow.py"
    script.write_text(
        "import sys, time\n"
        "import gaplens.tui.app\n"
        "def slow(trace):\n"
        "    time.sleep(60)\n"
        "gaplens.tui.app.compute = slow\n"
        f"sys.exit(gaplens.tui.app.run_app({str(sample('smells.json.gz'))!r}))\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal app on a pseudo-terminal
        os.chdir(root)
        os.environ.update(PYTHONPATH=root, TERM="xterm-256color", COLUMNS="100", LINES="30")
        os.execv(sys.executable, [sys.executable, str(script)])
    out = b""
    deadline = time.monotonic() + 30
    while b"analysing" not in out and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.2)[0]:
            try:
                out += os.read(fd, 65536)
            except OSError:
                break
    assert b"analysing" in out, out[-500:]
    os.write(fd, b"q")
    start = time.monotonic()
    while time.monotonic() - start < 20:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if select.select([fd], [], [], 0.1)[0]:
            with contextlib.suppress(OSError):  # the child closed its end
                os.read(fd, 65536)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    os.close(fd)
    assert done and time.monotonic() - start < 5 and os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("key", ["slash", "p"])
def test_prompts_fit_a_narrow_terminal(key):
    """The search and phase prompts were 70 columns wide whatever the terminal, cut off below 72 columns."""

    async def body(app, pilot, tl):
        await pilot.press(key)
        await pilot.pause()
        box = app.screen.query_one("#search" if key == "slash" else "#phases")
        assert box.outer_size.width <= 56 and box.region.right <= 56

    drive("smells.json.gz", body, size=(56, 20))
