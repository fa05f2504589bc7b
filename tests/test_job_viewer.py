"""The job viewer: the rank overview's bars, its keys, and a rank's timeline opened at the straggling moment."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest

from gaplens.tui import jobbars
from gaplens.tui.keys import KEYS
from gaplens.tui.screens.help import key_rows
from gaplens.tui.screens.job import JobApp, RankApp, neighbour, start_here
from tests.test_ranks import job_of, pair

SIZE = (140, 24)


def straggler_job():
    return job_of(*pair("ddp_straggler"))


def test_bars_show_who_waited_and_who_was_late():
    """Rank 0 waits (░) in the all_to_all for ~20 ms a step; rank 1, the straggler, never waits."""
    job = straggler_job()
    rows = {job.matched.ranks[i]: i for i in range(2)}
    e = jobbars.edges(*jobbars.job_window(job), 160)
    r0 = jobbars.row_classes(job, rows[0], e)
    r1 = jobbars.row_classes(job, rows[1], e)
    # Four steps of ~20 ms waiting in a ~160 ms window: about half of rank 0's cells.
    assert 0.35 < (r0 == jobbars.WAIT).mean() < 0.6
    assert (r1 == jobbars.WAIT).sum() == 0
    # While rank 0 waits, rank 1 is mostly idle (its data_wait: a host island), then runs its forward.
    assert (r1[r0 == jobbars.WAIT] == jobbars.IDLE).mean() > 0.6
    marks = jobbars.marks(job, e)
    assert marks.count("▼") == 1 and marks.count("│") >= 3
    assert len(jobbars.row_text(r0)) == 160


def test_shares_sum_to_at_most_one_cell():
    job = straggler_job()
    e = jobbars.edges(*jobbars.job_window(job), 97)
    for row in range(2):
        s = jobbars.shares(job, row, e)
        assert s.shape == (3, 97) and (s >= 0).all()
        assert (s[1] + s[2] <= 1.0 + 1e-9).all()


def test_job_keys_are_in_the_one_key_table_and_the_help():
    actions = {a for _, a, _, _ in KEYS}
    assert {"app.next_rank", "app.prev_rank", "app.straggler", "app.job"} <= actions
    described = {d for _, d in key_rows()}
    assert "Job: the straggler, at the straggling moment" in described


def test_overview_starts_on_the_straggler_and_says_where_to_start():
    asyncio.run(_test_overview_starts_on_the_straggler_and_says_where_to_start())


async def _test_overview_starts_on_the_straggler_and_says_where_to_start():
    job = straggler_job()
    app = JobApp(job)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        ov = app.overview
        assert job.matched.ranks[ov.row] == 1  # the straggler, first row, under the cursor
        assert "Start here: rank 1 is the straggler" in start_here(job) and "data_wait" in start_here(job)
        assert "▶" in ov.label_of(ov.row)
        await pilot.press("r")
        assert job.matched.ranks[ov.row] == 0
        await pilot.press("R")
        assert job.matched.ranks[ov.row] == 1
        await pilot.press("down")
        assert job.matched.ranks[ov.row] == 0
        await pilot.press("S")
        assert job.matched.ranks[ov.row] == 1
        await pilot.press("enter")
    assert app.return_value == ("open", job.straggler.row)


def test_control_overview_has_no_straggler():
    asyncio.run(_test_control_overview_has_no_straggler())


async def _test_control_overview_has_no_straggler():
    job = job_of(*pair("ddp_even"))
    app = JobApp(job)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("S")  # nothing to go to: a notice, the cursor stays
        assert app.overview.cursor == 0
        await pilot.press("q")
    assert app.return_value is None
    assert start_here(job).startswith("No straggler")


async def _placed(app, pilot) -> None:
    """Wait until the rank timeline is placed at the straggling moment and its readings (phases) are in."""
    for _ in range(400):
        await pilot.pause(0.05)
        if app._placed and app.model is not None and app.model.readings.analysed:
            return
    raise AssertionError("the rank timeline was never placed at the straggling moment")


def test_enter_opens_the_straggler_at_the_straggling_moment():
    asyncio.run(_test_enter_opens_the_straggler_at_the_straggling_moment())


async def _test_enter_opens_the_straggler_at_the_straggling_moment():
    """The straggler's timeline: the view spans its idle data_wait and its late all_to_all, selected."""
    job = straggler_job()
    row = job.straggler.row
    app = RankApp(job, row)
    async with app.run_test(size=SIZE) as pilot:
        await _placed(app, pilot)
        tl = app.timeline
        lo, hi = app.moment()
        assert tl.viewport.t0_ns <= lo and tl.viewport.t1_ns >= hi
        assert tl.viewport.span_ns < 2 * (hi - lo)
        sel = tl.selection
        assert sel is not None and sel.event >= 0
        trace = tl.model.trace
        assert trace.name(sel.event).startswith("ncclDevKernel_SendRecv")
        # What it did before arriving: data_wait sits inside the view.
        ann = [p for p in app.model.readings.phases if p.name == "data_wait"]
        assert any(lo <= p.host_start_ns and p.host_end_ns <= hi for p in ann)
        await pilot.press("r")
    assert app.next == ("open", neighbour(job, row, 1))


def test_rank_timeline_keys_go_back_to_the_overview():
    asyncio.run(_test_rank_timeline_keys_go_back_to_the_overview())


async def _test_rank_timeline_keys_go_back_to_the_overview():
    job = straggler_job()
    other = neighbour(job, job.straggler.row, 1)
    app = RankApp(job, other)
    async with app.run_test(size=SIZE) as pilot:
        await _placed(app, pilot)
        # The waiting rank at the same moment, on its own clock: its all_to_all kernel is the long one.
        sel = app.timeline.selection
        assert sel is not None and (sel.t1_ns - sel.t0_ns) > 15e6
        await pilot.press("J")
    assert app.next == ("job", other)
    app = RankApp(job, other)
    async with app.run_test(size=SIZE) as pilot:
        await _placed(app, pilot)
        await pilot.press("S")
    assert app.next == ("open", job.straggler.row)


def test_rows_follow_the_waiting_imposed():
    job = straggler_job()
    imposed = [r.imposed_ns for r in job.rows]
    assert imposed == sorted(imposed, reverse=True)
    assert np.all(np.diff([r.imposed_ns for r in job.rows]) <= 0)


def test_overview_without_colour(monkeypatch):
    """NO_COLOR: the glyphs alone tell compute, communication and waiting apart, and every line renders."""
    monkeypatch.setenv("NO_COLOR", "1")
    job = straggler_job()

    async def body() -> None:
        app = JobApp(job)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            svg = app.export_screenshot()
            assert "░" in svg and "█" in svg
            await pilot.press("q")

    asyncio.run(body())


def test_arrow_keys_move_the_cursor_in_a_list_longer_than_the_screen():
    """60 ranks on a 24-line terminal: the list scrolls, and up / down / end / home / page keys still move the
    cursor (the scroll view's own bindings would scroll the list and leave the cursor behind), keeping it on
    screen."""
    from tests.test_ranks_scale import synthetic

    job = synthetic(60, straggler=7, slow=(), low=())

    async def body() -> None:
        app = JobApp(job)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            ov = app.overview
            visible = ov.scrollable_content_region.height
            assert 0 < visible < 60 and ov.cursor == 0

            def on_screen() -> bool:
                return ov.scroll_offset.y <= ov.cursor < ov.scroll_offset.y + visible

            for _ in range(visible + 5):  # past the bottom of the screen: the list scrolls with the cursor
                await pilot.press("down")
            assert ov.cursor == visible + 5 and ov.scroll_offset.y > 0 and on_screen()
            await pilot.press("up")
            assert ov.cursor == visible + 4 and on_screen()
            await pilot.press("end")
            assert ov.cursor == 59 and on_screen()
            await pilot.press("up", "up")
            assert ov.cursor == 57 and on_screen()
            await pilot.press("pageup")
            assert ov.cursor == 57 - visible and on_screen()
            await pilot.press("pagedown")
            assert ov.cursor == 57 and on_screen()
            await pilot.press("home")
            assert ov.cursor == 0 and ov.scroll_offset.y == 0
            await pilot.press("j", "j", "k")
            assert ov.cursor == 1
            await pilot.press("enter")
        assert app.return_value == ("open", job.rows[1].row)

    asyncio.run(body())


class _Counted(list):
    """A list that counts the walks over it: the overview must not walk every rank per frame or per key."""

    walks = 0

    def __iter__(self):
        type(self).walks += 1
        return super().__iter__()


@pytest.mark.slow
def test_overview_of_10000_ranks_draws_and_moves_without_walking_the_ranks():
    """10,000 ranks (copies of the real DDP ranks' readings, the straggler at 6,000): the overview opens on the
    straggler, draws only the rows on screen, and its keys (cursor, page, end, next / previous rank, straggler)
    move the cursor without walking the job's rows, whatever the list's length."""
    from tests.test_ranks_scale import synthetic

    base = synthetic(10_000, straggler=6_000, slow=(), low=())
    assert base.matched.ranks == sorted(base.matched.ranks)  # rows in rank order: neighbour() relies on it
    job = dataclasses.replace(base, rows=_Counted(base.rows))
    size = (140, 40)
    drawn: list[int] = []
    real = jobbars.row_classes

    def counted_row_classes(j, row, edges):
        drawn.append(row)
        return real(j, row, edges)

    async def body() -> None:
        app = JobApp(job)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(jobbars, "row_classes", counted_row_classes)
            async with app.run_test(size=size) as pilot:
                await pilot.pause()
                ov = app.overview
                visible = ov.scrollable_content_region.height
                assert job.matched.ranks[ov.row] == 6_000 and ov.cursor == 0
                assert 0 < len(set(drawn)) <= visible  # the rows on screen, not 10,000
                _Counted.walks = 0
                await pilot.press("end")
                assert ov.cursor == 9_999 and ov.scroll_offset.y >= 10_000 - visible
                await pilot.press("pageup", "up")
                assert ov.cursor == 9_999 - visible - 1
                await pilot.press("r")
                assert job.matched.ranks[ov.row] == job.matched.ranks[job.rows[9_999 - visible - 1].row] + 1
                await pilot.press("S")
                assert ov.cursor == 0 and job.matched.ranks[ov.row] == 6_000
                await pilot.press("R")
                assert job.matched.ranks[ov.row] == 5_999
                await pilot.pause()
                assert _Counted.walks == 0
                assert len(set(drawn)) <= 6 * visible  # each screen drawn once: a few screens, not the list
                await pilot.press("q")

    asyncio.run(body())
