"""Pilot tests of protocol mode: walk the six steps, pin notes, mark phases, export, survive a restart."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest

from gaplens.store.notes import NotesStore
from gaplens.tui.app import make_app
from gaplens.tui.notes_panel import LineInput, NotesPanel
from gaplens.tui.protocol_panel import ProtocolPanel
from tests.conftest import sample
from tests.pilot import readings_ready

SIZE = (160, 48)


@pytest.fixture
def trace_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request) -> Path:
    """A private copy of a sample so notes and exports land in tmp_path."""
    monkeypatch.setenv("GAPLENS_STATE_DIR", str(tmp_path / "state"))
    name = getattr(request, "param", "smells.json.gz")  # small: loads fast
    dst = tmp_path / name
    shutil.copyfile(sample(name), dst)
    return dst


async def _walk_ready(app, pilot) -> ProtocolPanel:
    for _ in range(400):
        await app.workers.wait_for_complete()
        await pilot.pause()
        if app.walkthrough is not None and app.protocol_step:
            return app.query_one(ProtocolPanel)
        await asyncio.sleep(0.02)
    raise AssertionError("the walkthrough never arrived")


def _run(coro) -> None:
    asyncio.run(coro)


def _in_view(tl, t0: int, t1: int) -> bool:
    vp = tl.viewport
    return vp.t0_ns <= t0 and t1 <= vp.t1_ns


@pytest.mark.parametrize("trace_copy", ["decode_eager.json.gz", "smells.json.gz"], indirect=True)
def test_walk_all_six_steps(trace_copy: Path) -> None:
    app = make_app(str(trace_copy))

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            tl = await readings_ready(app, pilot)
            trace = app.model.trace
            await pilot.press("P")
            panel = await _walk_ready(app, pilot)
            walk = app.walkthrough
            gap = walk.gap
            assert gap is not None
            lo, hi = app.model.extent

            # 1: the workload facts; the view fits everything.
            assert app.protocol_step == 1
            text = panel.facts_text
            assert "Step 1 of 6 · Name the workload" in text and "NVIDIA H200" in text
            assert tl.viewport.t0_ns <= lo and hi <= tl.viewport.t1_ns

            # 2: phases: the row cursor sits on the phases row above the lanes.
            await pilot.press("right_square_bracket")
            assert app.protocol_step == 2
            assert "Mark the phases" in panel.facts_text
            assert tl.current_row().kind.name == "PHASES"
            assert "decode" in panel.facts_text if "decode" in trace_copy.name else "tokenize" in panel.facts_text

            # 3: fit and the plain busy verdict.
            await pilot.press("right_square_bracket")
            assert "GPU mostly waiting" in panel.facts_text
            assert tl.viewport.t0_ns <= lo and hi <= tl.viewport.t1_ns

            # 4: zoomed to the largest blank region, selected and framed.
            await pilot.press("right_square_bracket")
            assert app.protocol_step == 4
            assert tl.selection is not None and tl.selection.gap is not None
            assert (tl.selection.t0_ns, tl.selection.t1_ns) == (gap.start_ns, gap.end_ns)
            assert _in_view(tl, gap.start_ns, gap.end_ns)
            assert tl.viewport.span_ns < 3 * gap.dur_ns
            assert fmt_in(panel.facts_text, "decode_step" if "decode" in trace_copy.name else "tokenize")

            # 5: the evidence is selected in place (marked, the first one selected), the cause is named.
            await pilot.press("right_square_bracket")
            step5 = walk.step(5)
            assert "cause:" in panel.facts_text
            if step5.view.select:
                assert set(tl.matches.tolist()) == set(step5.view.select)
                assert tl.selection.event in step5.view.select
                assert _in_view(tl, gap.start_ns, gap.end_ns) and tl.viewport.span_ns < 3 * gap.dur_ns
                # The selected evidence is host work covering the region, not wider than twice it.
                sel_s, sel_e = trace.start_ns[tl.selection.event], trace.end_ns[tl.selection.event]
                assert sel_s < gap.end_ns and sel_e > gap.start_ns and sel_e - sel_s <= 2 * gap.dur_ns
                assert int(trace.kind[tl.selection.event]) not in (5, 6, 7)  # not a kernel or a copy
            else:
                assert "collect a better trace" in panel.facts_text

            # 6: the lever and the experiment, written in the panel and saved.
            await pilot.press("right_square_bracket")
            assert app.protocol_step == 6 and "gaplens compare" in panel.facts_text
            assert len(tl.matches) == 0  # evidence marks are cleared when leaving step 5
            await pilot.press("e")
            await pilot.press("ctrl+u")  # clear a prefilled suggestion
            for ch in "capture decode in a CUDA graph":
                await pilot.press("space" if ch == " " else ch)
            await pilot.press("enter")
            assert app.notes.experiment == "capture decode in a CUDA graph"
            assert app.focused is tl
            # Past the last step nothing moves; [ goes back.
            await pilot.press("right_square_bracket")
            assert app.protocol_step == 6
            await pilot.press("left_square_bracket")
            assert app.protocol_step == 5
            await pilot.press("P")
            await pilot.pause()
            assert not app.query(ProtocolPanel) and app.protocol_step == 0

    _run(main())
    saved = NotesStore(trace_copy).load()
    assert saved.experiment == "capture decode in a CUDA graph" and saved.answers[6] == saved.experiment


def fmt_in(text: str, needle: str) -> bool:
    return needle in text


def test_answers_notes_and_phases_survive_a_restart(trace_copy: Path) -> None:
    app = make_app(str(trace_copy))

    async def first() -> None:
        async with app.run_test(size=SIZE) as pilot:
            tl = await readings_ready(app, pilot)
            await pilot.press("P")
            await _walk_ready(app, pilot)
            await pilot.press("e", "ctrl+u", *"llama", "enter")
            assert app.notes.answers[1] == "llama"
            # A note at the cursor.
            await pilot.press("b")
            assert isinstance(app.screen, LineInput)
            await pilot.press(*"slow", "enter")
            # A note pinned to the evidence event of step 5.
            await pilot.press("right_square_bracket", "right_square_bracket", "right_square_bracket")
            await pilot.press("right_square_bracket")
            event = tl.selection.event
            assert event >= 0
            await pilot.press("b", *"sync", "enter")
            # Mark a phase with two presses of m, then name it.
            t0 = tl.cursor_ns
            await pilot.press("m", "right", "right", "right", "m")
            assert isinstance(app.screen, LineInput)
            await pilot.press(*"mine", "enter")
            assert [p.name for p in app.notes.phases] == ["mine"]
            assert any(p.name == "mine" for p in app.model.readings.phases)
            assert app.notes.phases[0].start_ns == int(t0)
            assert {n.text for n in app.notes.notes} == {"slow", "sync"}

    _run(first())
    pinned = next(n for n in app.notes.notes if n.text == "sync")
    assert pinned.event_name

    again = make_app(str(trace_copy))

    async def second() -> None:
        async with again.run_test(size=SIZE) as pilot:
            tl = await readings_ready(again, pilot)
            assert again.notes.answers[1] == "llama"
            assert {n.text for n in again.notes.notes} == {"slow", "sync"}
            assert any(p.name == "mine" for p in again.model.readings.phases)
            # The notes panel lists them; enter on the event note jumps to and selects the event.
            await pilot.press("B")
            panel = again.query_one(NotesPanel)
            lst = panel.query_one("#notes-list")
            assert lst.option_count == 2
            k = next(i for i, n in enumerate(again.notes.notes) if n.text == "sync")
            lst.highlighted = k
            await pilot.press("enter")
            trace = again.model.trace
            assert tl.selection is not None and trace.names[int(trace.name_id[tl.selection.event])] == pinned.event_name
            assert int(trace.start_ns[tl.selection.event]) == pinned.start_ns
            # Edit, then delete, from the list.
            lst.focus()
            lst.highlighted = k
            await pilot.press("e", "ctrl+u", *"sync2", "enter")
            assert {n.text for n in again.notes.notes} == {"slow", "sync2"}
            lst.focus()
            lst.highlighted = 0
            await pilot.press("x")
            assert len(again.notes.notes) == 1 and lst.option_count == 1

    _run(second())
    assert len(NotesStore(trace_copy).load().notes) == 1


def test_rename_a_phase(trace_copy: Path) -> None:
    app = make_app(str(trace_copy))

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            tl = await readings_ready(app, pilot)
            from gaplens.tui.navigate import Selection

            prefill = next(p for p in app.model.readings.phases if p.name == "tokenize")
            tl.select(Selection(prefill.start_ns, prefill.end_ns, phase=prefill))
            await pilot.press("m")
            assert isinstance(app.screen, LineInput)
            await pilot.press("ctrl+u", *"warmup", "enter")
            names = [p.name for p in app.model.readings.phases]
            assert "warmup" in names and names.count("tokenize") == 1  # only the selected one is renamed
            assert app.notes.phases[0].original == "tokenize"

    _run(main())


def test_export_writes_markdown_and_svg(trace_copy: Path) -> None:
    app = make_app(str(trace_copy))

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await readings_ready(app, pilot)
            await pilot.press("P")
            await _walk_ready(app, pilot)
            await pilot.press("e", "ctrl+u", *"batch 4", "enter")
            await pilot.press("E")
            await pilot.pause()

    _run(main())
    exports = trace_copy.parent / "state" / "exports"  # the state dir: nothing is written beside the trace
    md = (exports / (trace_copy.name + ".gaplens.md")).read_text()
    svg = (exports / (trace_copy.name + ".gaplens.svg")).read_text()
    assert "batch 4" in md and "Name the workload" in md
    assert svg.lstrip().startswith("<svg") and "Step 1 of 6" in svg.replace("&#160;", " ")


def test_palette_lists_protocol_commands(trace_copy: Path) -> None:
    app = make_app(str(trace_copy))

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await readings_ready(app, pilot)
            titles = [c.title for c in app.get_system_commands(app.screen)]
            assert "Guided reading: the six-step protocol" in titles
            assert "Pin a note to the cursor or the selected event" in titles

    _run(main())


def test_evidence_is_cleared_when_protocol_closes(trace_copy: Path) -> None:
    app = make_app(str(trace_copy))

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            tl = await readings_ready(app, pilot)
            await pilot.press("P")
            await _walk_ready(app, pilot)
            for _ in range(4):
                await pilot.press("right_square_bracket")
            assert app.protocol_step == 5 and len(tl.matches)
            await pilot.press("P")
            assert len(tl.matches) == 0 and np.asarray(tl.match_order).size == 0

    _run(main())


_APP_KILLER = """
import asyncio, os, signal, sys
sys.path.insert(0, {root!r})
from gaplens.store import notes as notes_mod
from gaplens.tui.app import make_app
from tests.pilot import readings_ready

app = make_app({trace!r})

async def main():
    async with app.run_test(size=(120, 40)) as pilot:
        await readings_ready(app, pilot)
        await pilot.press("b", *"first", "enter")  # saved whole
        # The next save dies between writing the temp file and renaming it over.
        notes_mod.os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
        await pilot.press("b", *"second", "enter")

asyncio.run(main())
"""


def test_app_killed_mid_write_keeps_the_previous_notes(trace_copy: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT

    script = _APP_KILLER.format(root=str(ROOT), trace=str(trace_copy))
    proc = subprocess.run([sys.executable, "-c", script], env={**os.environ}, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    notes = NotesStore(trace_copy).load()
    assert [n.text for n in notes.notes] == ["first"]
