"""Pilot helpers shared by the viewer's tests: the one way to wait until a trace's readings are on screen."""

from __future__ import annotations

import asyncio

from textual.worker import WorkerCancelled

from gaplens.tui.app import GaplensApp
from gaplens.tui.timeline import Timeline


async def readings_ready(app: GaplensApp, pilot, tries: int = 400) -> Timeline | None:
    """Wait for the loading worker and the messages it posted (the model, then its readings).

    Returns the mounted timeline, or None when the app exited instead (unusable input).
    """
    for _ in range(tries):
        if app.return_code is not None:
            return None
        try:
            await app.workers.wait_for_complete()
        except WorkerCancelled:  # the app exited (unusable input)
            return None
        await pilot.pause()
        if app.model is not None and not app.analysing and app.query(Timeline):
            return app.query_one(Timeline)
        await asyncio.sleep(0.01)
    raise AssertionError("the readings never arrived")


async def snapshot_ready(pilot) -> None:
    """``run_before`` of the snapshot tests: the readings are drawn before the picture is taken."""
    await readings_ready(pilot.app, pilot)
    await pilot.pause()


def screen_lines(app: GaplensApp) -> list[str]:
    """The current screen as plain text, one string per terminal row (what a user would read)."""
    return ["".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips()]
