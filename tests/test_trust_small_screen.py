"""80×24, the smallest terminal the viewer promises: step 1's text says when it runs on and scrolls with keys;
the same toast is never stacked twice over the timeline (issue 22, item 6)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from textual.containers import VerticalScroll
from textual.widgets import Static

from gaplens.tui.app import make_app
from gaplens.tui.protocol_panel import ProtocolPanel
from tests.conftest import sample
from tests.pilot import readings_ready


@pytest.fixture
def trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GAPLENS_STATE_DIR", str(tmp_path / "state"))
    dst = tmp_path / "decode_eager.json.gz"  # bundled: step 1 names hardware, framework, versions, dtype
    shutil.copyfile(sample("decode_eager.json.gz"), dst)
    return dst


async def _step_one(app, pilot) -> ProtocolPanel:
    await readings_ready(app, pilot)
    await pilot.press("P")
    for _ in range(400):
        await app.workers.wait_for_complete()
        await pilot.pause()
        panels = app.query(ProtocolPanel)
        if panels and panels.first().step_number == 1:
            await pilot.pause()
            return panels.first()
    raise AssertionError("step 1 never shown")


def test_step_one_at_80x24_says_there_is_more_and_scrolls_to_it(trace):
    app = make_app(str(trace))

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            panel = await _step_one(app, pilot)
            box = panel.query_one("#protocol-facts-box", VerticalScroll)
            more = panel.query_one("#protocol-more", Static)
            assert box.max_scroll_y > 0, "the step's text fits: this test needs a screen it overflows"
            assert more.display and "more below" in str(more.content)
            await pilot.press("right_curly_bracket")
            await pilot.pause()
            assert box.scroll_y > 0
            for _ in range(20):
                await pilot.press("right_curly_bracket")
            await pilot.pause()
            assert box.scroll_y == box.max_scroll_y and not more.display  # at the end: no hint
            await pilot.press("left_curly_bracket")
            await pilot.pause()
            assert box.scroll_y < box.max_scroll_y and more.display

    asyncio.run(main())


@pytest.mark.slow
def test_step_one_on_a_tall_screen_has_no_hint(trace):
    app = make_app(str(trace))

    async def main() -> None:
        async with app.run_test(size=(160, 60)) as pilot:
            panel = await _step_one(app, pilot)
            box = panel.query_one("#protocol-facts-box", VerticalScroll)
            assert box.max_scroll_y == 0 and not panel.query_one("#protocol-more", Static).display

    asyncio.run(main())


@pytest.mark.slow
def test_the_same_toast_is_not_stacked(trace):
    """P, P, P while the walkthrough is read, enter twice on an answer: each message is on screen once."""
    app = make_app(str(trace))

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await readings_ready(app, pilot)
            await pilot.press("P", "P")  # open and close at once: the walkthrough is still being read
            await _step_one(app, pilot)  # the third P
            for _ in range(2):
                await pilot.press("e")
                await pilot.pause()
                await pilot.press("enter")
                await pilot.pause()
            shown = [n.message for n in app._notifications]
            assert shown and len(shown) == len(set(shown)), shown

    asyncio.run(main())
