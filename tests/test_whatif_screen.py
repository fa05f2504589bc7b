"""The what-if screen (`W`, the palette, step 6 of the walk): Pilot, small-screen and SVG snapshot tests.

graphs_fault (round 3, H200): 8 decode_step, launch-bound eager decode; its lever is `--graph step`
(13.7 ms → 1.08 ms per step predicted), and `--remove host` finds no island there (no gain).
loader_fault: a DataLoader-starved train_step; its lever is `--remove host`.
Expected numbers come from ``analysis.whatif.whatif`` called here, formatted as the CLI formats them.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Static

from gaplens.analysis.units import fmt_ns
from gaplens.analysis.whatif import Change, whatif
from gaplens.loaders import load
from gaplens.tui.app import make_app
from gaplens.tui.protocol_panel import ProtocolPanel
from gaplens.tui.screens.whatif import WhatIfScreen, choices, parse_typed
from tests.pilot import readings_ready, screen_lines, snapshot_ready

DATA = Path(__file__).parent / "data"
GRAPHS = DATA / "round3" / "graphs_fault.json.gz"
LOADER = DATA / "round3" / "loader_fault.json.gz"
GRAPH_STEP = (Change("graph", "step"),)
REMOVE_HOST = (Change("remove", "host"),)


def _predicted_median(trace, changes) -> str:
    return fmt_ns(whatif(trace, list(changes))["steps"]["predicted_median_ns"])


async def _shown(pilot, changes: tuple[Change, ...] | None = None, tries: int = 400) -> WhatIfScreen:
    """Wait until the what-if screen shows a prediction (for ``changes`` when given)."""
    for _ in range(tries):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        screen = pilot.app.screen
        shown = isinstance(screen, WhatIfScreen) and screen.shown is not None
        if shown and (changes is None or screen.shown_changes == changes):
            await pilot.pause()
            return screen
        await asyncio.sleep(0.02)
    raise AssertionError(f"the what-if screen never showed {changes}")


def _summary_predicted(screen: WhatIfScreen) -> str:
    """The predicted median on the step line of the summary: what follows the arrow, before the change."""
    text = str(screen.query_one("#whatif-summary", Static).render())
    step_line = text.splitlines()[1]
    return step_line.split("→")[1].split()[0] + " " + step_line.split("→")[1].split()[1]


def _status(screen: WhatIfScreen) -> str:
    return str(screen.query_one("#whatif-status", Static).render())


# ---- pure -----------------------------------------------------------------------------------


def test_typed_changes_parse_as_on_the_command_line():
    assert parse_typed("--remove host") == [Change("remove", "host")]
    assert parse_typed("--graph 'decode step' --scale=*gemm*=0.5") == [
        Change("graph", "decode step"),
        Change("scale", "*gemm*", 0.5),
    ]
    assert parse_typed("remove sync") == [Change("remove", "sync")]
    for bad, words in (
        ("--scale x", "GLOB=FACTOR"),
        ("--remove kernels", "one of host"),
        ("--graph", "wants a value"),
        ("--shrink gemm", "type a change"),
        ("", "type a change"),
        ("--graph 'step", "quotation"),
    ):
        with pytest.raises(ValueError, match=words):
            parse_typed(bad)


def test_the_choices_put_the_levers_first():
    found, default, why = choices(load(str(GRAPHS)))
    assert default == 0 and not why
    assert found[0].changes == GRAPH_STEP and "proposed lever (launch)" in found[0].label
    listed = [c.changes for c in found]
    for cause in ("host", "launch", "sync", "alloc", "copy"):
        assert (Change("remove", cause),) in listed
    assert len(set(listed)) == len(listed)  # each change once
    found, default, _ = choices(load(str(LOADER)))
    assert found[default or 0].changes == REMOVE_HOST


# ---- Pilot ----------------------------------------------------------------------------------


def test_whatif_from_the_palette_default_pick_type_and_jump():
    """The palette opens it on the lever; --remove host from the list; a typo and a refusal say so on one
    line and the screen stays usable; enter on a step frames that step on the timeline."""
    trace = load(str(GRAPHS))
    app = make_app(trace)

    async def main() -> None:
        async with app.run_test(size=(120, 36)) as pilot:
            tl = await readings_ready(app, pilot)
            commands = {c.title: c for c in app.get_system_commands(app.screen)}
            title = next(t for t in commands if t.startswith("What if"))
            assert "keys: W" in commands[title].help
            app.call_later(commands[title].callback)  # as the palette runs a command
            screen = await _shown(pilot)
            assert screen.shown_changes == GRAPH_STEP  # the lever's change, preselected
            graph = _predicted_median(trace, GRAPH_STEP)
            assert _summary_predicted(screen) == graph
            r = whatif(trace, list(GRAPH_STEP))
            table = screen.query_one(DataTable)
            assert table.row_count == len(r["per_step"]) == 8
            first = [str(c) for c in table.get_row_at(0)]
            assert first[0] == r["per_step"][0]["name"] and first[2] == fmt_ns(r["per_step"][0]["predicted_ns"])
            assert first[4] == "warm-up" and str(table.get_row_at(1)[4]) == ""

            # --remove host, picked from the list with the keys
            await pilot.press("c")
            await pilot.press("down", "enter")
            screen = await _shown(pilot, REMOVE_HOST)
            host = _predicted_median(trace, REMOVE_HOST)
            assert host != graph and _summary_predicted(screen) == host
            assert "no host island" in str(screen.query_one("#whatif-notes", Static).render())

            # a typo: one line, in the error style, and the screen still answers
            await pilot.press("e")
            assert isinstance(app.focused, Input)
            await pilot.press(*"--scale x", "enter")
            await pilot.pause()
            status = screen.query_one("#whatif-status", Static)
            assert status.has_class("-error") and "--scale wants GLOB=FACTOR" in _status(screen)
            assert status.size.height == 1 and "\n" not in _status(screen)
            assert app.screen is screen and _summary_predicted(screen) == host  # the last prediction stays
            # a change the trace refuses (ValueError from whatif): its reason, one line, no traceback
            inp = screen.query_one(Input)
            inp.value = "--graph nope"
            await pilot.press("enter")
            for _ in range(200):
                await app.workers.wait_for_complete()
                await pilot.pause()
                if "refused" in _status(screen):
                    break
            assert "--graph nope refused: --graph 'nope': no step or phase" in _status(screen)
            assert status.has_class("-error") and screen.query_one(DataTable).row_count == 0
            # and a good one typed after it
            inp.value = "--remove launch"
            await pilot.press("enter")
            screen = await _shown(pilot, (Change("remove", "launch"),))
            assert not status.has_class("-error")
            assert _summary_predicted(screen) == _predicted_median(trace, [Change("remove", "launch")])

            # enter on the third step: the screen closes, the timeline frames and selects decode_step 5
            table = screen.query_one(DataTable)
            table.focus()
            await pilot.press("down", "down", "enter")
            await pilot.pause()
            assert not isinstance(app.screen, WhatIfScreen)
            pick = screen.picks[2]
            assert pick.name == r["per_step"][2]["name"] == "decode_step 5"
            sel = tl.selection
            assert sel is not None and sel.phase is not None and sel.phase.name == "decode_step 5"
            s, e = pick.span_ns
            assert (sel.t0_ns, sel.t1_ns) == (s, e)
            vp = tl.viewport
            assert vp.t0_ns <= s and e <= vp.t1_ns and vp.span_ns < 2 * (e - s)  # framed, not the whole trace

    asyncio.run(main())


def test_whatif_at_80x24_shows_the_median_and_steps():
    """The smallest terminal the viewer promises: `W`, the predicted median and at least 3 step rows on screen."""
    trace = load(str(GRAPHS))
    app = make_app(trace)

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await readings_ready(app, pilot)
            await pilot.press("W")
            await _shown(pilot, GRAPH_STEP)
            lines = screen_lines(app)
            assert len(lines) == 24
            graph = _predicted_median(trace, GRAPH_STEP)
            step_line = next(ln for ln in lines if ln.lstrip().startswith("decode_step (median"))
            assert f"→ {graph:>10}" in step_line
            rows = [ln for ln in lines if ln.lstrip().startswith("decode_step ") and "ms" in ln and "→" not in ln]
            assert len(rows) >= 3, "\n".join(lines)
            assert any("warm-up" in ln for ln in rows)
            assert any("--graph step" in ln for ln in lines[:3])  # the change chosen, at the top
            # the notes keep four lines, so the steps keep the screen; n shows them whole
            assert not any("static buffers" in ln for ln in lines)
            await pilot.press("n")
            await pilot.pause()
            lines = screen_lines(app)
            assert any("static buffers" in ln for ln in lines)  # the graph note's last words
            assert sum(ln.lstrip().startswith("decode_step ") and "→" not in ln for ln in lines) >= 3

    asyncio.run(main())


@pytest.mark.slow
def test_step_six_opens_whatif_on_its_lever(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Step 6 proposes `--remove host` for loader_fault: its keys line offers W, and W opens on that change."""
    monkeypatch.setenv("GAPLENS_STATE_DIR", str(tmp_path / "state"))
    dst = tmp_path / LOADER.name
    shutil.copyfile(LOADER, dst)
    app = make_app(str(dst))

    async def main() -> None:
        async with app.run_test(size=(120, 36)) as pilot:
            await readings_ready(app, pilot)
            await pilot.press("P")
            for _ in range(400):
                await app.workers.wait_for_complete()
                await pilot.pause()
                if app.walkthrough is not None and app.protocol_step:
                    break
                await asyncio.sleep(0.02)
            app._go(6)
            await pilot.pause()
            panel = app.query_one(ProtocolPanel)
            assert "W what if" in str(panel.query_one("#protocol-keys", Static).render())
            await pilot.press("W")
            screen = await _shown(pilot)
            assert screen.shown_changes == REMOVE_HOST
            assert _summary_predicted(screen) == _predicted_median(app.model.trace, REMOVE_HOST)

    asyncio.run(main())


@pytest.mark.slow
def test_whatif_snapshot(snap_compare):
    """`W` on graphs_fault at 80×24: `--graph step` chosen, 111 ms → 9.52 ms window, 13.7 ms → 1.08 ms per
    decode_step, the change's words and notes, the eight steps with decode_step 3 marked warm-up."""

    async def ready(pilot) -> None:
        await snapshot_ready(pilot)
        await pilot.press("W")
        await _shown(pilot, GRAPH_STEP)

    assert snap_compare(make_app(load(str(GRAPHS)), mono=False), terminal_size=(80, 24), run_before=ready)
